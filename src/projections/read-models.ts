import type { KeyEvent } from '../domain/events.js';
import { foldJobEvent, jobStatements, newJobChange, type JobChange } from './job-rows.js';
import { isLedgerStream, ms, statement, type ProjectedEvent, type Projection, type Statement } from './projection.js';

/** The read models' projection name (projection_checkpoints, its advisory lock). */
export const READ_MODELS = 'read_models';

/** The tables a rebuild empties (jl_key_stats, jl_slots and jl_parked are views over them), in the order the projection writes them (see rebuild.ts lockOut). */
export const READ_MODEL_TABLES = ['jl_keys', 'jl_jobs', 'jl_limit_jobs'] as const;

/**
 * The read models jl_jobs (with the views jl_slots and jl_parked over it), jl_keys and
 * jl_limit_jobs (schema and meaning: migrations 0003-read-models, 0005-set-based-writes,
 * 0008-limit-keys and 0015-live-row), as ONE projection with one checkpoint: a limit key's guests
 * (jl_limit_jobs) are read with their home's rows, which is only sound if all the tables are at
 * the same point of the ledger.
 *
 * The events of a batch are folded per job (./job-rows.ts) and per limit stream and guest first:
 * what each row looks like after the batch; then written with at most seven set-based statements,
 * whatever the batch's size. The fold follows src/domain/key-state.ts's evolve, so that after
 * any batch jl_slots holds the states' holders, jl_parked their parked jobs, jl_jobs (run_at set)
 * their scheduled ones and jl_limit_jobs their guests (holding or parked); unlike the states,
 * jl_jobs keeps finished jobs (history).
 */
export const createReadModelProjections = (): Projection => ({
  name: READ_MODELS,
  handles: isLedgerStream,
  project: projectReadModels,
  rebuild: { tables: READ_MODEL_TABLES },
});

/** A limit key's event about a guest (a job of another stream under its limit). */
type GuestEvent = Extract<KeyEvent, { type: 'LimitWaiting' | 'LimitHeld' | 'LimitReleased' | 'LimitLeft' }>;

const isGuestEvent = (event: KeyEvent): event is GuestEvent =>
  event.type === 'LimitWaiting' || event.type === 'LimitHeld' || event.type === 'LimitReleased' || event.type === 'LimitLeft';

interface GuestRow {
  home: string;
  status: 'parked' | 'holding';
  lease_id: string | null;
  since: number;
  priority: number;
  seq: number;
}

/** What one batch does to one guest's jl_limit_jobs row (one per limit stream and job). */
interface GuestChange {
  readonly stream: string;
  readonly key: string | null;
  readonly jobId: string;
  /** It left the key in the batch: a row from before the batch goes. */
  drop: boolean;
  /** Its row at the end of the batch; null: none, or the row from before the batch as it was. */
  row: GuestRow | null;
}

/**
 * The per-guest mirror of evolve: a guest the batch has not seen yet may have a row from before
 * it, so its row is upserted and keeps that row's place in line (priority, seq), as the state
 * keeps a known guest's; one that left and came back in the batch (a retry) gets a new place.
 */
const foldGuest = (g: GuestChange, event: GuestEvent, revision: number): void => {
  switch (event.type) {
    case 'LimitWaiting':
    case 'LimitHeld': {
      const held = event.type === 'LimitHeld';
      const place = { status: held ? ('holding' as const) : ('parked' as const), lease_id: held ? event.data.leaseId : null, since: event.data.at };
      if (g.row !== null) Object.assign(g.row, place);
      else g.row = { home: event.data.home, ...place, priority: event.data.priority, seq: revision };
      return;
    }
    case 'LimitReleased':
    case 'LimitLeft':
      g.drop = true;
      g.row = null;
      return;
  }
};

export const projectReadModels = (events: readonly ProjectedEvent[]): readonly Statement[] => {
  const jobs = new Map<string, JobChange>();
  const guests = new Map<string, GuestChange>();
  const keys = new Map<string, { stream: string; key: string; concurrency_limit: number; lease_ms: number; updated_at: number }>();
  // The last pause or resume of each stream in the batch: the state it leaves is all that counts.
  const pauses = new Map<string, { stream: string; paused_at: number | null; paused_by: string | null; paused_reason: string | null }>();
  for (const pe of events) {
    const { event } = pe;
    if (event.type === 'KeyLimitSet') {
      // A job without a key gets a limit-1 stream of its own: not a key a dashboard lists.
      if (pe.key !== null) keys.set(pe.stream, { stream: pe.stream, key: pe.key, concurrency_limit: event.data.limit, lease_ms: event.data.leaseMs, updated_at: event.data.at });
      continue;
    }
    if (event.type === 'KeyPaused' || event.type === 'KeyResumed') {
      const paused = event.type === 'KeyPaused';
      pauses.set(pe.stream, { stream: pe.stream, paused_at: paused ? event.data.at : null, paused_by: paused ? event.data.by : null, paused_reason: paused ? event.data.reason : null });
      continue;
    }
    if (isGuestEvent(event)) {
      // A guest's row at its home (jl_jobs) follows its home stream's events.
      const id = `${pe.stream}\u0000${event.data.jobId}`;
      let g = guests.get(id);
      if (g === undefined) guests.set(id, (g = { stream: pe.stream, key: pe.key, jobId: event.data.jobId, drop: false, row: null }));
      foldGuest(g, event, pe.revision);
      continue;
    }
    const { jobId } = event.data;
    let c = jobs.get(jobId);
    if (c === undefined) jobs.set(jobId, (c = newJobChange(pe, jobId)));
    foldJobEvent(c, pe);
  }
  const out: Statement[] = [];
  const add = (text: string, rows: readonly unknown[]) => {
    if (rows.length > 0) out.push(statement(text, JSON.stringify(rows)));
  };
  add(UPSERT_KEYS_SQL, [...keys.values()]);
  if (pauses.size > 0) out.push(statement(PAUSE_KEYS_SQL, JSON.stringify([...pauses.values()]), [...pauses.values()].map((p) => p.stream)));
  out.push(...jobStatements([...jobs.values()]));
  const visits = [...guests.values()];
  const left = visits.filter((g) => g.drop);
  if (left.length > 0) out.push(statement(DELETE_LIMIT_JOBS_SQL, JSON.stringify(left.map((g) => ({ stream: g.stream, job_id: g.jobId }))), left.map((g) => g.jobId), [...new Set(left.map((g) => g.stream))]));
  add(UPSERT_LIMIT_JOBS_SQL, visits.filter((g) => g.row !== null).map((g) => ({ stream: g.stream, key: g.key, job_id: g.jobId, ...g.row })));
  return out;
};

// Every statement takes its rows as ONE JSON array ($1): one round trip and one plan per table,
// whatever the batch's size. The planner takes a JSON array for 100 rows, so an UPDATE joining
// it could hash-join a whole table: the UPDATEs also name their keys ($2), so each row is found
// by its primary key however big the table is, and their streams (on a distributed ledger, the
// shards to touch: by a join alone every shard is asked). In READ_MODEL_TABLES' order; jl_limit_jobs' deletes
// before its upserts (a guest that left and came back in the batch is a new row).

export const UPSERT_KEYS_SQL = `
INSERT INTO jl_keys (stream, key, concurrency_limit, lease_ms, updated_at)
SELECT stream, key, concurrency_limit, lease_ms, ${ms('updated_at')}
FROM jsonb_to_recordset($1::jsonb) AS x (stream text, key text, concurrency_limit int, lease_ms int, updated_at float8)
ON CONFLICT (stream) DO UPDATE SET concurrency_limit = excluded.concurrency_limit, lease_ms = excluded.lease_ms, updated_at = excluded.updated_at`;

/** After UPSERT_KEYS_SQL: a key's first KeyLimitSet comes before any pause of it. */
export const PAUSE_KEYS_SQL = `
UPDATE jl_keys k SET paused_at = ${ms('x.paused_at')}, paused_by = x.paused_by, paused_reason = x.paused_reason
FROM jsonb_to_recordset($1::jsonb) AS x (stream text, paused_at float8, paused_by text, paused_reason text)
WHERE k.stream = ANY ($2::text[]) AND k.stream = x.stream`;

// $2: the job ids of the rows, so the planner finds each through jl_limit_jobs_job (see above).
export const DELETE_LIMIT_JOBS_SQL = `
DELETE FROM jl_limit_jobs g
USING jsonb_to_recordset($1::jsonb) AS x (stream text, job_id text)
WHERE g.job_id = ANY ($2::text[]) AND g.job_id = x.job_id AND g.stream = x.stream AND g.stream = ANY ($3::text[])`;

// A guest with a row from before the batch keeps its place in line (priority, seq, home): only
// where it is and since when change, as in the key's state.
export const UPSERT_LIMIT_JOBS_SQL = `
INSERT INTO jl_limit_jobs (stream, key, job_id, home, status, lease_id, since, priority, seq)
SELECT stream, key, job_id, home, status, lease_id, ${ms('since')}, priority, seq
FROM jsonb_to_recordset($1::jsonb) AS x (stream text, key text, job_id text, home text, status text, lease_id text, since float8, priority bigint, seq bigint)
ON CONFLICT (stream, job_id) DO UPDATE SET status = excluded.status, lease_id = excluded.lease_id, since = excluded.since`;

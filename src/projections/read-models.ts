import type { KeyEvent } from '../domain/events.js';
import { isLedgerStream, ms, statement, type ProjectedEvent, type Projection, type Statement } from './projection.js';

/** The read models' projection name (projection_checkpoints, its advisory lock). */
export const READ_MODELS = 'read_models';

/** The tables a rebuild empties (jl_key_stats is a view over them), in the order the projection writes them (see rebuild.ts lockOut). */
export const READ_MODEL_TABLES = ['jl_keys', 'jl_jobs', 'jl_slots', 'jl_parked', 'jl_limit_jobs'] as const;

/**
 * The read models jl_jobs, jl_slots, jl_parked, jl_keys and jl_limit_jobs (schema and meaning:
 * migrations 0003-read-models, 0005-set-based-writes and 0008-limit-keys), as ONE projection with
 * one checkpoint: jl_parked takes a job's priority and enqueue order from jl_jobs, and a limit
 * key's guests (jl_limit_jobs) are read with their home's rows, which is only sound if all the
 * tables are at the same point of the ledger.
 *
 * The events of a batch are folded per job (and per limit stream and guest) first: what each
 * row looks like after the batch; then written with at most eleven set-based statements, whatever
 * the batch's size. The fold follows src/domain/key-state.ts's evolve, so that after any batch
 * jl_slots holds the states' holders, jl_parked their parked jobs, jl_jobs (run_at set) their
 * scheduled ones and jl_limit_jobs their guests (holding or parked); unlike the states, jl_jobs
 * keeps finished jobs (history). A job whose JobEnqueued is in the
 * batch gets one INSERT of its final row, which is all a rebuild writes for most jobs.
 */
export const createReadModelProjections = (): Projection => ({
  name: READ_MODELS,
  handles: isLedgerStream,
  project: projectReadModels,
  rebuild: { tables: READ_MODEL_TABLES },
});

// Bits of JobChange.m: which jl_jobs columns the batch set (a set column may be set to NULL).
const STATUS = 1;
const ATTEMPTS = 2;
const RUN_AT = 4;
const STARTED_AT = 8;
const FINISHED_AT = 16;
const LAST_ERROR = 32;
const FINISH_REASON = 64;
const WORKER_ID = 128;
const LEASE_ID = 256;
/** jl_jobs.seq: a dead job retried takes a new place at the back of its line (key-state.ts arrive). */
const SEQ = 512;

// Bits of SlotChange.m.
const SLOT_STARTED = 1;
const SLOT_EXPIRES = 2;
const SLOT_REVOKED = 4;

interface Columns {
  status: string | null;
  attempts: number | null;
  run_at: number | null;
  started_at: number | null;
  finished_at: number | null;
  last_error: string | null;
  finish_reason: string | null;
  worker_id: string | null;
  lease_id: string | null;
}

interface SlotRow {
  lease_id: string;
  how: 'acquired' | 'promoted';
  acquired_at: number;
  expires_at: number | null;
  worker_id: string | null;
  started_at: number | null;
  attempt: number | null;
  revoked_by: string | null;
  revoked_at: number | null;
  revoke_cancels: boolean | null;
}

/** A revocation of a running lease (LeaseRevoked): who, when, and whether it cancels the job. */
type Revocation = Pick<SlotRow, 'revoked_by' | 'revoked_at' | 'revoke_cancels'>;

/** What one batch does to one job's rows. */
interface JobChange {
  readonly jobId: string;
  readonly stream: string;
  readonly key: string | null;
  /** Its JobEnqueued is in the batch: no row of it existed before. `limits`: null for a job under no further limit. */
  created: { seq: number; name: string; queue: string; args: unknown; priority: number; max_attempts: number; lease_ms: number; enqueued_at: number; limits: string[] | null } | null;
  m: number;
  readonly cols: Columns;
  /** With SEQ: the revision of its JobRetried, its new place in line (kept apart from cols: an INSERT takes created.seq). */
  seq: number | null;
  /** Time of the last event that changes its jl_jobs row; null: the row is not touched. */
  updatedAt: number | null;
  /** A JobYielded recorded before it carried `attempts`: hand the attempt back if jl_slots says this lease was started. */
  yieldLease: string | null;
  /** Its slot row from before the batch goes. */
  dropSlot: boolean;
  /** A slot taken in the batch and still held at its end. */
  slot: SlotRow | null;
  /** Changes to a slot row from before the batch (SLOT_* bits). */
  slotPatch: ({ m: number; worker_id: string | null; attempt: number | null; started_at: number | null; expires_at: number | null } & Revocation) | null;
  /** Its jl_parked row from before the batch goes. */
  dropParked: boolean;
  /** Parked in the batch and still parked at its end: when, and the revision of its JobParked. */
  parked: { at: number; revision: number } | null;
}

const change = (pe: ProjectedEvent, jobId: string): JobChange => ({
  jobId,
  stream: pe.stream,
  key: pe.key,
  created: null,
  m: 0,
  seq: null,
  cols: { status: null, attempts: null, run_at: null, started_at: null, finished_at: null, last_error: null, finish_reason: null, worker_id: null, lease_id: null },
  updatedAt: null,
  yieldLease: null,
  dropSlot: false,
  slot: null,
  slotPatch: null,
  dropParked: false,
  parked: null,
});

const set = <K extends keyof Columns>(c: JobChange, bit: number, column: K, value: Columns[K]): void => {
  c.m |= bit;
  c.cols[column] = value;
  // An absolute count already says what a legacy yield before it handed back.
  if (column === 'attempts') c.yieldLease = null;
};

/** The job leaves parking (promoted, finished). `fromParking`: the event implies it was parked, so a row from before the batch must go. */
const leaveParking = (c: JobChange, fromParking: boolean): void => {
  if (c.parked !== null) c.parked = null;
  else if (fromParking && c.created === null) c.dropParked = true;
};

const patchSlot = (c: JobChange): NonNullable<JobChange['slotPatch']> =>
  (c.slotPatch ??= { m: 0, worker_id: null, attempt: null, started_at: null, expires_at: null, revoked_by: null, revoked_at: null, revoke_cancels: null });

// A rejected job and a replaced parked one never run: discarded, with why in finish_reason.
const FINISHED: Partial<Record<KeyEvent['type'], string>> = {
  JobCompleted: 'completed',
  JobDead: 'dead',
  JobCancelled: 'cancelled',
  ParkedDiscarded: 'discarded',
  JobRejected: 'discarded',
  ParkedReplaced: 'discarded',
};
const HOLDING = new Set(['holding', 'running']);

/** Folds one event into its job's change (the per-job mirror of evolve). */
const foldEvent = (c: JobChange, pe: ProjectedEvent): void => {
  const { event } = pe;
  const at = event.data.at;
  switch (event.type) {
    case 'JobEnqueued': {
      const d = event.data;
      const limits = d.limits !== undefined && d.limits.length > 0 ? d.limits : null;
      c.created = { seq: pe.revision, name: d.name, queue: d.queue, args: d.args ?? null, priority: d.priority, max_attempts: d.maxAttempts, lease_ms: d.leaseMs, enqueued_at: at, limits };
      set(c, STATUS, 'status', 'pending');
      set(c, ATTEMPTS, 'attempts', 0);
      break;
    }
    case 'SlotAcquired':
    case 'JobPromoted':
      leaveParking(c, event.type === 'JobPromoted');
      set(c, STATUS, 'status', 'holding');
      set(c, LEASE_ID, 'lease_id', event.data.leaseId);
      set(c, RUN_AT, 'run_at', null);
      c.slot = { lease_id: event.data.leaseId, how: event.type === 'SlotAcquired' ? 'acquired' : 'promoted', acquired_at: at, expires_at: null, worker_id: null, started_at: null, attempt: null, revoked_by: null, revoked_at: null, revoke_cancels: null };
      break;
    case 'JobRetried':
      // Back from the dead as a new arrival: pending until the same append admits or parks it, a
      // fresh set of attempts, unfinished; its last error stays, for history.
      if (c.created !== null) c.created.seq = pe.revision;
      else {
        c.m |= SEQ;
        c.seq = pe.revision;
      }
      set(c, STATUS, 'status', 'pending');
      set(c, ATTEMPTS, 'attempts', 0);
      set(c, RUN_AT, 'run_at', null);
      set(c, FINISHED_AT, 'finished_at', null);
      set(c, FINISH_REASON, 'finish_reason', null);
      break;
    case 'DeadDiscarded':
      // Off the failed list for good; it stays finished when it died (finished_at).
      set(c, STATUS, 'status', 'discarded');
      set(c, FINISH_REASON, 'finish_reason', `dead, then discarded by ${event.data.by}`);
      break;
    case 'JobParked':
      set(c, STATUS, 'status', 'parked');
      set(c, RUN_AT, 'run_at', null);
      c.parked = { at, revision: pe.revision };
      break;
    case 'JobScheduled':
      set(c, STATUS, 'status', 'scheduled');
      set(c, RUN_AT, 'run_at', event.data.runAt);
      break;
    case 'JobStarted': {
      const { workerId, attempt, expiresAt } = event.data;
      if (c.slot !== null) Object.assign(c.slot, { worker_id: workerId, attempt, started_at: at, expires_at: expiresAt });
      else {
        const p = patchSlot(c);
        Object.assign(p, { m: p.m | SLOT_STARTED | SLOT_EXPIRES, worker_id: workerId, attempt, started_at: at, expires_at: expiresAt });
      }
      set(c, STATUS, 'status', 'running');
      set(c, ATTEMPTS, 'attempts', attempt);
      set(c, WORKER_ID, 'worker_id', workerId);
      set(c, STARTED_AT, 'started_at', at);
      break;
    }
    case 'LeaseRenewed':
      // The slot only: a renewal leaves jl_jobs (and its updated_at) alone.
      if (c.slot !== null) c.slot.expires_at = event.data.expiresAt;
      else {
        const p = patchSlot(c);
        p.m |= SLOT_EXPIRES;
        p.expires_at = event.data.expiresAt;
      }
      return;
    case 'JobYielded':
      if (event.data.attempts !== undefined) set(c, ATTEMPTS, 'attempts', event.data.attempts);
      else {
        // Whether the yielded lease was started, when the batch knows (else jl_slots does).
        const started = c.slot !== null ? c.slot.worker_id !== null : c.slotPatch !== null && c.slotPatch.m & SLOT_STARTED ? true : undefined;
        if (started === true) set(c, ATTEMPTS, 'attempts', c.cols.attempts! - 1);
        else if (started === undefined) c.yieldLease = event.data.leaseId;
      }
      break;
    case 'SlotReleased':
      if (c.slot !== null) c.slot = null;
      else {
        c.dropSlot = c.created === null;
        c.slotPatch = null;
      }
      set(c, LEASE_ID, 'lease_id', null);
      // A finished job keeps its status; a job released to go elsewhere is pending until the next
      // event of the same append says where (so never at the end of a batch).
      if (!(c.m & STATUS) || HOLDING.has(c.cols.status!)) set(c, STATUS, 'status', 'pending');
      break;
    case 'JobFailed':
      set(c, LAST_ERROR, 'last_error', event.data.error);
      set(c, ATTEMPTS, 'attempts', event.data.attempt);
      break;
    case 'JobCompleted':
    case 'JobDead':
    case 'JobCancelled':
    case 'ParkedDiscarded':
    case 'JobRejected':
    case 'ParkedReplaced': {
      // A finished job leaves jl_parked; a holder keeps its slot until the SlotReleased that follows.
      leaveParking(c, event.type === 'JobCancelled' || event.type === 'ParkedDiscarded' || event.type === 'ParkedReplaced');
      set(c, STATUS, 'status', FINISHED[event.type]!);
      set(c, FINISH_REASON, 'finish_reason', finishReason(event));
      set(c, RUN_AT, 'run_at', null);
      set(c, FINISHED_AT, 'finished_at', at);
      break;
    }
    case 'LeaseRevoked': {
      // The holder is stopping (the slot stays until the SlotReleased that follows: in this append for a lease nobody started, later for a running one).
      const revocation: Revocation = { revoked_by: event.data.by, revoked_at: at, revoke_cancels: event.data.cancel === true };
      if (c.slot !== null) Object.assign(c.slot, revocation);
      else {
        const p = patchSlot(c);
        Object.assign(p, { m: p.m | SLOT_REVOKED, ...revocation });
      }
      return;
    }
    case 'KeyLimitSet':
    case 'LeaseExpired':
      // KeyLimitSet is the key's (jl_keys); the SlotReleased that follows an expiry frees the slot.
      return;
  }
  c.updatedAt = at;
};

const finishReason = (event: KeyEvent): string | null => {
  switch (event.type) {
    case 'JobDead':
      return event.data.reason;
    case 'JobCancelled':
      return `cancelled by ${event.data.by}`;
    case 'ParkedDiscarded':
      return `discarded by ${event.data.by}`;
    case 'JobRejected':
      return `rejected: ${event.data.reason}`;
    case 'ParkedReplaced':
      return `replaced by ${event.data.by}`;
    default:
      return null;
  }
};

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
      // A guest's rows at its home (jl_jobs, jl_slots, jl_parked) follow its home stream's events.
      const id = `${pe.stream}\u0000${event.data.jobId}`;
      let g = guests.get(id);
      if (g === undefined) guests.set(id, (g = { stream: pe.stream, key: pe.key, jobId: event.data.jobId, drop: false, row: null }));
      foldGuest(g, event, pe.revision);
      continue;
    }
    const { jobId } = event.data;
    let c = jobs.get(jobId);
    if (c === undefined) jobs.set(jobId, (c = change(pe, jobId)));
    foldEvent(c, pe);
  }
  const all = [...jobs.values()];
  const out: Statement[] = [];
  const add = (text: string, rows: readonly unknown[]) => {
    if (rows.length > 0) out.push(statement(text, JSON.stringify(rows)));
  };
  add(UPSERT_KEYS_SQL, [...keys.values()]);
  add(PAUSE_KEYS_SQL, [...pauses.values()]);
  add(INSERT_JOBS_SQL, all.filter((c) => c.created !== null).map((c) => ({ job_id: c.jobId, stream: c.stream, key: c.key, ...c.created, ...c.cols, updated_at: c.updatedAt })));
  const updated = all.filter((c) => c.created === null && c.updatedAt !== null);
  if (updated.length > 0) out.push(statement(UPDATE_JOBS_SQL, JSON.stringify(updated.map((c) => ({ job_id: c.jobId, m: c.m, ...c.cols, seq: c.seq, yield_lease: c.yieldLease, updated_at: c.updatedAt }))), updated.map((c) => c.jobId)));
  const dropSlots = all.filter((c) => c.dropSlot).map((c) => c.jobId);
  if (dropSlots.length > 0) out.push(statement(DELETE_SLOTS_SQL, dropSlots));
  add(INSERT_SLOTS_SQL, all.filter((c) => c.slot !== null).map((c) => ({ job_id: c.jobId, stream: c.stream, key: c.key, ...c.slot })));
  const patched = all.filter((c) => c.slotPatch !== null);
  if (patched.length > 0) out.push(statement(UPDATE_SLOTS_SQL, JSON.stringify(patched.map((c) => ({ job_id: c.jobId, ...c.slotPatch }))), patched.map((c) => c.jobId)));
  const dropParked = all.filter((c) => c.dropParked).map((c) => c.jobId);
  if (dropParked.length > 0) out.push(statement(DELETE_PARKED_SQL, dropParked));
  add(UPSERT_PARKED_SQL, all.filter((c) => c.parked !== null).map((c) => ({ job_id: c.jobId, parked_at: c.parked!.at, revision: c.parked!.revision })));
  const visits = [...guests.values()];
  const left = visits.filter((g) => g.drop);
  if (left.length > 0) out.push(statement(DELETE_LIMIT_JOBS_SQL, JSON.stringify(left.map((g) => ({ stream: g.stream, job_id: g.jobId }))), left.map((g) => g.jobId)));
  add(UPSERT_LIMIT_JOBS_SQL, visits.filter((g) => g.row !== null).map((g) => ({ stream: g.stream, key: g.key, job_id: g.jobId, ...g.row })));
  return out;
};

// Every statement takes its rows as ONE JSON array ($1): one round trip and one plan per table,
// whatever the batch's size. The planner takes a JSON array for 100 rows, so an UPDATE joining
// it could hash-join a whole table: the UPDATEs also name their keys ($2) and the joins are
// LATERAL, so each row is found by its primary key however big the table is. Epoch-ms times arrive as float8 and become timestamptz the same way
// live and in a rebuild, so both write the same rows. In this order: jl_jobs before jl_parked (a
// parked row takes its priority and seq from jl_jobs) and before the jl_slots deletes (a legacy
// yield reads the slot it hands an attempt back for); jl_limit_jobs last (READ_MODEL_TABLES),
// its deletes before its upserts (a guest that left and came back in the batch is a new row).

export const UPSERT_KEYS_SQL = `
INSERT INTO jl_keys (stream, key, concurrency_limit, lease_ms, updated_at)
SELECT stream, key, concurrency_limit, lease_ms, ${ms('updated_at')}
FROM jsonb_to_recordset($1::jsonb) AS x (stream text, key text, concurrency_limit int, lease_ms int, updated_at float8)
ON CONFLICT (stream) DO UPDATE SET concurrency_limit = excluded.concurrency_limit, lease_ms = excluded.lease_ms, updated_at = excluded.updated_at`;

/** After UPSERT_KEYS_SQL: a key's first KeyLimitSet comes before any pause of it. */
export const PAUSE_KEYS_SQL = `
UPDATE jl_keys k SET paused_at = ${ms('x.paused_at')}, paused_by = x.paused_by, paused_reason = x.paused_reason
FROM jsonb_to_recordset($1::jsonb) AS x (stream text, paused_at float8, paused_by text, paused_reason text)
WHERE k.stream = x.stream`;

export const INSERT_JOBS_SQL = `
INSERT INTO jl_jobs (job_id, stream, key, seq, name, queue, args, priority, status, attempts, max_attempts, lease_ms,
                     enqueued_at, run_at, started_at, finished_at, last_error, finish_reason, worker_id, lease_id, updated_at, limits)
SELECT job_id, stream, key, seq, name, queue, coalesce(args, 'null'), priority, status, attempts, max_attempts, lease_ms,
       ${ms('enqueued_at')}, ${ms('run_at')}, ${ms('started_at')}, ${ms('finished_at')}, last_error, finish_reason, worker_id, lease_id, ${ms('updated_at')}, limits
FROM jsonb_to_recordset($1::jsonb) AS x (
  job_id text, stream text, key text, seq bigint, name text, queue text, args jsonb, priority bigint, status text, attempts int,
  max_attempts int, lease_ms int, enqueued_at float8, run_at float8, started_at float8, finished_at float8, last_error text,
  finish_reason text, worker_id text, lease_id text, updated_at float8, limits text[])`;

const keep = (bit: number, column: string, value: string) => `${column} = CASE WHEN x.m & ${bit} <> 0 THEN ${value} ELSE j.${column} END`;

export const UPDATE_JOBS_SQL = `
UPDATE jl_jobs j SET
  ${keep(STATUS, 'status', 'x.status')},
  attempts = CASE WHEN x.m & ${ATTEMPTS} <> 0 THEN x.attempts ELSE j.attempts END
    - CASE WHEN x.yield_lease IS NOT NULL AND EXISTS (
        SELECT FROM jl_slots s WHERE s.job_id = j.job_id AND s.lease_id = x.yield_lease AND s.worker_id IS NOT NULL
      ) THEN 1 ELSE 0 END,
  ${keep(RUN_AT, 'run_at', ms('x.run_at'))},
  ${keep(STARTED_AT, 'started_at', ms('x.started_at'))},
  ${keep(FINISHED_AT, 'finished_at', ms('x.finished_at'))},
  ${keep(LAST_ERROR, 'last_error', 'x.last_error')},
  ${keep(FINISH_REASON, 'finish_reason', 'x.finish_reason')},
  ${keep(WORKER_ID, 'worker_id', 'x.worker_id')},
  ${keep(LEASE_ID, 'lease_id', 'x.lease_id')},
  ${keep(SEQ, 'seq', 'x.seq')},
  updated_at = ${ms('x.updated_at')}
FROM jsonb_to_recordset($1::jsonb) AS x (
  job_id text, m int, status text, attempts int, run_at float8, started_at float8, finished_at float8, last_error text,
  finish_reason text, worker_id text, lease_id text, seq bigint, yield_lease text, updated_at float8)
WHERE j.job_id = ANY ($2::text[]) AND j.job_id = x.job_id`;

export const DELETE_SLOTS_SQL = `DELETE FROM jl_slots WHERE job_id = ANY($1::text[])`;

export const INSERT_SLOTS_SQL = `
INSERT INTO jl_slots (job_id, stream, key, lease_id, how, acquired_at, expires_at, worker_id, started_at, attempt, revoked_by, revoked_at, revoke_cancels)
SELECT job_id, stream, key, lease_id, how, ${ms('acquired_at')}, ${ms('expires_at')}, worker_id, ${ms('started_at')}, attempt, revoked_by, ${ms('revoked_at')}, revoke_cancels
FROM jsonb_to_recordset($1::jsonb) AS x (
  job_id text, stream text, key text, lease_id text, how text, acquired_at float8, expires_at float8, worker_id text, started_at float8, attempt int,
  revoked_by text, revoked_at float8, revoke_cancels boolean)`;

export const UPDATE_SLOTS_SQL = `
UPDATE jl_slots s SET
  worker_id = CASE WHEN x.m & ${SLOT_STARTED} <> 0 THEN x.worker_id ELSE s.worker_id END,
  attempt = CASE WHEN x.m & ${SLOT_STARTED} <> 0 THEN x.attempt ELSE s.attempt END,
  started_at = CASE WHEN x.m & ${SLOT_STARTED} <> 0 THEN ${ms('x.started_at')} ELSE s.started_at END,
  expires_at = CASE WHEN x.m & ${SLOT_EXPIRES} <> 0 THEN ${ms('x.expires_at')} ELSE s.expires_at END,
  revoked_by = CASE WHEN x.m & ${SLOT_REVOKED} <> 0 THEN x.revoked_by ELSE s.revoked_by END,
  revoked_at = CASE WHEN x.m & ${SLOT_REVOKED} <> 0 THEN ${ms('x.revoked_at')} ELSE s.revoked_at END,
  revoke_cancels = CASE WHEN x.m & ${SLOT_REVOKED} <> 0 THEN x.revoke_cancels ELSE s.revoke_cancels END
FROM jsonb_to_recordset($1::jsonb) AS x (job_id text, m int, worker_id text, attempt int, started_at float8, expires_at float8, revoked_by text, revoked_at float8, revoke_cancels boolean)
WHERE s.job_id = ANY ($2::text[]) AND s.job_id = x.job_id`;

export const DELETE_PARKED_SQL = `DELETE FROM jl_parked WHERE job_id = ANY($1::text[])`;

// The LEFT JOIN is on purpose: a parked job missing from jl_jobs would be a broken ledger, and
// its NULL stream fails the NOT NULL constraint instead of being skipped. A job under further
// limits takes a new place at the back of its line each time it parks (key-state.ts JobParked):
// the revision of its JobParked, not its enqueue order.
export const UPSERT_PARKED_SQL = `
INSERT INTO jl_parked (job_id, stream, key, priority, seq, parked_at)
SELECT x.job_id, j.stream, j.key, j.priority, CASE WHEN j.limits IS NULL THEN j.seq ELSE x.revision END, ${ms('x.parked_at')}
FROM jsonb_to_recordset($1::jsonb) AS x (job_id text, parked_at float8, revision bigint)
LEFT JOIN LATERAL (SELECT stream, key, priority, seq, limits FROM jl_jobs WHERE jl_jobs.job_id = x.job_id) j ON true
ON CONFLICT (job_id) DO UPDATE SET parked_at = excluded.parked_at, seq = excluded.seq`;

// $2: the job ids of the rows, so the planner finds each through jl_limit_jobs_job (see above).
export const DELETE_LIMIT_JOBS_SQL = `
DELETE FROM jl_limit_jobs g
USING jsonb_to_recordset($1::jsonb) AS x (stream text, job_id text)
WHERE g.job_id = ANY ($2::text[]) AND g.job_id = x.job_id AND g.stream = x.stream`;

// A guest with a row from before the batch keeps its place in line (priority, seq, home): only
// where it is and since when change, as in the key's state.
export const UPSERT_LIMIT_JOBS_SQL = `
INSERT INTO jl_limit_jobs (stream, key, job_id, home, status, lease_id, since, priority, seq)
SELECT stream, key, job_id, home, status, lease_id, ${ms('since')}, priority, seq
FROM jsonb_to_recordset($1::jsonb) AS x (stream text, key text, job_id text, home text, status text, lease_id text, since float8, priority bigint, seq bigint)
ON CONFLICT (stream, job_id) DO UPDATE SET status = excluded.status, lease_id = excluded.lease_id, since = excluded.since`;

import type { KeyEvent } from '../domain/events.js';
import { ms, statement, type ProjectedEvent, type Statement } from './projection.js';

// A job's one row in jl_jobs (migration 0015): its history and, while unfinished, its live row
// (its slot, its place in a line, and as an admitted job nobody started, the dispatch message a
// worker claims). The events of a batch are folded per job first (the per-job mirror of
// src/domain/key-state.ts's evolve): what the row looks like after the batch, then ONE INSERT for
// the jobs enqueued in the batch (all a rebuild writes for most jobs) and ONE UPDATE for the
// others, whatever the batch's size.

// Bits of JobChange.m: which columns the batch set (a set column may be set to NULL).
const STATUS = 1;
const ATTEMPTS = 2;
const RUN_AT = 4;
const STARTED_AT = 8;
const FINISHED_AT = 16;
const LAST_ERROR = 32;
const FINISH_REASON = 64;
const WORKER_ID = 128;
/** lease_id, how, acquired_at: taken together at an admission, cleared together at the release. */
const SLOT = 256;
/** seq: a dead job retried takes a new place at the back of its line (key-state.ts arrive). */
const SEQ = 512;
const EXPIRES_AT = 1024;
/** revoked_by, revoked_at, revoke_cancels. */
const REVOKED = 2048;
/** parked_at and park_seq. */
const PARKED = 4096;

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
  how: 'acquired' | 'promoted' | null;
  acquired_at: number | null;
  expires_at: number | null;
  revoked_by: string | null;
  revoked_at: number | null;
  revoke_cancels: boolean | null;
  parked_at: number | null;
  /** With PARKED, the revision of the JobParked: the place in line of a job under further limits (the UPDATE picks seq for the others). */
  parked_revision: number | null;
}

/** What one batch does to one job's row. */
export interface JobChange {
  readonly jobId: string;
  readonly stream: string;
  readonly key: string | null;
  /** Its JobEnqueued is in the batch: no row of it existed before. `limits`: null for a job under no further limit. */
  created: { seq: number; name: string; queue: string; args: unknown; priority: number; max_attempts: number; lease_ms: number; enqueued_at: number; limits: string[] | null } | null;
  m: number;
  readonly cols: Columns;
  /** With SEQ: the revision of its JobRetried, its new place in line (kept apart from cols: an INSERT takes created.seq). */
  seq: number | null;
  /** Time of the last event that changes its history (lease renewals and revocations do not); null: none did. */
  updatedAt: number | null;
  /** A JobYielded recorded before it carried `attempts`: hand the attempt back if the row says this lease was started. */
  yieldLease: string | null;
}

export const newJobChange = (pe: ProjectedEvent, jobId: string): JobChange => ({
  jobId,
  stream: pe.stream,
  key: pe.key,
  created: null,
  m: 0,
  seq: null,
  cols: {
    status: null, attempts: null, run_at: null, started_at: null, finished_at: null, last_error: null, finish_reason: null, worker_id: null,
    lease_id: null, how: null, acquired_at: null, expires_at: null, revoked_by: null, revoked_at: null, revoke_cancels: null, parked_at: null, parked_revision: null,
  },
  updatedAt: null,
  yieldLease: null,
});

const set = (c: JobChange, bit: number, values: Partial<Columns>): void => {
  c.m |= bit;
  Object.assign(c.cols, values);
  // An absolute count already says what a legacy yield before it handed back.
  if (bit === ATTEMPTS) c.yieldLease = null;
};

const NO_SLOT = { lease_id: null, how: null, acquired_at: null } as const;
const NOT_REVOKED = { revoked_by: null, revoked_at: null, revoke_cancels: null } as const;
const NOT_PARKED = { parked_at: null, parked_revision: null } as const;

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

/** The started state of `leaseId` as the batch knows it: true, false, or undefined (the row from before the batch says). */
const startedInBatch = (c: JobChange): boolean | undefined => (c.m & SLOT ? c.cols.status === 'running' : c.m & STATUS && c.cols.status === 'running' ? true : undefined);

/** Folds one event of the job's own stream into its change. */
export const foldJobEvent = (c: JobChange, pe: ProjectedEvent): void => {
  const { event } = pe;
  const at = event.data.at;
  switch (event.type) {
    case 'JobEnqueued': {
      const d = event.data;
      const limits = d.limits !== undefined && d.limits.length > 0 ? d.limits : null;
      c.created = { seq: pe.revision, name: d.name, queue: d.queue, args: d.args ?? null, priority: d.priority, max_attempts: d.maxAttempts, lease_ms: d.leaseMs, enqueued_at: at, limits };
      set(c, STATUS, { status: 'pending' });
      set(c, ATTEMPTS, { attempts: 0 });
      break;
    }
    case 'SlotAcquired':
    case 'JobPromoted':
      set(c, STATUS, { status: 'holding' });
      set(c, SLOT, { lease_id: event.data.leaseId, how: event.type === 'SlotAcquired' ? 'acquired' : 'promoted', acquired_at: at });
      set(c, EXPIRES_AT, { expires_at: null });
      set(c, REVOKED, NOT_REVOKED);
      set(c, PARKED, NOT_PARKED);
      set(c, RUN_AT, { run_at: null });
      break;
    case 'JobRetried':
      // Back from the dead as a new arrival: pending until the same append admits or parks it, a
      // fresh set of attempts, unfinished; its last error stays, for history.
      if (c.created !== null) c.created.seq = pe.revision;
      else {
        c.m |= SEQ;
        c.seq = pe.revision;
      }
      set(c, STATUS, { status: 'pending' });
      set(c, ATTEMPTS, { attempts: 0 });
      set(c, RUN_AT, { run_at: null });
      set(c, FINISHED_AT, { finished_at: null });
      set(c, FINISH_REASON, { finish_reason: null });
      break;
    case 'DeadDiscarded':
      // Off the failed list for good; it stays finished when it died (finished_at).
      set(c, STATUS, { status: 'discarded' });
      set(c, FINISH_REASON, { finish_reason: `dead, then discarded by ${event.data.by}` });
      break;
    case 'JobParked':
      set(c, STATUS, { status: 'parked' });
      set(c, RUN_AT, { run_at: null });
      set(c, PARKED, { parked_at: at, parked_revision: pe.revision });
      break;
    case 'JobScheduled':
      set(c, STATUS, { status: 'scheduled' });
      set(c, RUN_AT, { run_at: event.data.runAt });
      break;
    case 'JobStarted': {
      const { workerId, attempt, expiresAt } = event.data;
      set(c, STATUS, { status: 'running' });
      set(c, ATTEMPTS, { attempts: attempt });
      set(c, WORKER_ID, { worker_id: workerId });
      set(c, STARTED_AT, { started_at: at });
      set(c, EXPIRES_AT, { expires_at: expiresAt });
      break;
    }
    case 'LeaseRenewed':
      set(c, EXPIRES_AT, { expires_at: event.data.expiresAt });
      return;
    case 'LeaseRevoked':
      // The holder is stopping (the slot stays until the SlotReleased that follows: in this append for a lease nobody started, later for a running one).
      set(c, REVOKED, { revoked_by: event.data.by, revoked_at: at, revoke_cancels: event.data.cancel === true });
      return;
    case 'JobYielded':
      if (event.data.attempts !== undefined) set(c, ATTEMPTS, { attempts: event.data.attempts });
      else {
        // Whether the yielded lease was started, when the batch knows (else the row does).
        const started = startedInBatch(c);
        if (started === true) set(c, ATTEMPTS, { attempts: c.cols.attempts! - 1 });
        else if (started === undefined) c.yieldLease = event.data.leaseId;
      }
      break;
    case 'SlotReleased':
      set(c, SLOT, NO_SLOT);
      set(c, EXPIRES_AT, { expires_at: null });
      set(c, REVOKED, NOT_REVOKED);
      // A finished job keeps its status; a job released to go elsewhere is pending until the next
      // event of the same append says where (so never at the end of a batch).
      if (!(c.m & STATUS) || HOLDING.has(c.cols.status!)) set(c, STATUS, { status: 'pending' });
      break;
    case 'JobFailed':
      set(c, LAST_ERROR, { last_error: event.data.error });
      set(c, ATTEMPTS, { attempts: event.data.attempt });
      break;
    case 'JobCompleted':
    case 'JobDead':
    case 'JobCancelled':
    case 'ParkedDiscarded':
    case 'JobRejected':
    case 'ParkedReplaced':
      // A finished job leaves its line; a holder keeps its slot until the SlotReleased that follows.
      set(c, STATUS, { status: FINISHED[event.type]! });
      set(c, PARKED, NOT_PARKED);
      set(c, FINISH_REASON, { finish_reason: finishReason(event) });
      set(c, RUN_AT, { run_at: null });
      set(c, FINISHED_AT, { finished_at: at });
      break;
    default:
      // KeyLimitSet, pauses and the guest events are the key's (read-models.ts); the SlotReleased that follows an expiry frees the slot.
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

/**
 * A row without its null columns: jsonb_to_recordset gives a missing key NULL, as it gives null,
 * and a new job's row is mostly nulls (half its JSON, parsed by the server at every insert).
 */
const withoutNulls = (row: Record<string, unknown>): Record<string, unknown> => {
  const out: Record<string, unknown> = {};
  for (const k in row) if (row[k] !== null && row[k] !== undefined) out[k] = row[k];
  return out;
};

/** The statements for the batch's job changes: the new rows, then the changed ones. */
export const jobStatements = (changes: readonly JobChange[]): Statement[] => {
  const out: Statement[] = [];
  const created = changes.filter((c) => c.created !== null);
  if (created.length > 0) {
    const rows = created.map((c) => {
      const { parked_revision, ...cols } = c.cols;
      const park_seq = cols.parked_at === null ? null : c.created!.limits === null ? c.created!.seq : parked_revision;
      return withoutNulls({ job_id: c.jobId, stream: c.stream, key: c.key, ...c.created, ...cols, park_seq, updated_at: c.updatedAt });
    });
    out.push(statement(INSERT_JOBS_SQL, JSON.stringify(rows)));
  }
  const updated = changes.filter((c) => c.created === null && (c.m !== 0 || c.yieldLease !== null || c.updatedAt !== null));
  if (updated.length > 0) {
    const rows = updated.map((c) => ({ job_id: c.jobId, m: c.m, ...c.cols, seq: c.seq, yield_lease: c.yieldLease, updated_at: c.updatedAt }));
    out.push(statement(UPDATE_JOBS_SQL, JSON.stringify(rows), updated.map((c) => c.jobId), String(updated.length), [...new Set(updated.map((c) => c.stream))]));
  }
  return out;
};

// Epoch-ms times arrive as float8 and become timestamptz the same way live and in a rebuild, so
// both write the same rows.
export const INSERT_JOBS_SQL = `
INSERT INTO jl_jobs (job_id, stream, key, seq, name, queue, args, priority, status, attempts, max_attempts, lease_ms,
                     enqueued_at, run_at, started_at, finished_at, last_error, finish_reason, worker_id, lease_id, updated_at, limits,
                     how, acquired_at, expires_at, revoked_by, revoked_at, revoke_cancels, parked_at, park_seq)
SELECT job_id, stream, key, seq, name, queue, coalesce(args, 'null'), priority, status, attempts, max_attempts, lease_ms,
       ${ms('enqueued_at')}, ${ms('run_at')}, ${ms('started_at')}, ${ms('finished_at')}, last_error, finish_reason, worker_id, lease_id, ${ms('updated_at')}, limits,
       how, ${ms('acquired_at')}, ${ms('expires_at')}, revoked_by, ${ms('revoked_at')}, revoke_cancels, ${ms('parked_at')}, park_seq
FROM jsonb_to_recordset($1::jsonb) AS x (
  job_id text, stream text, key text, seq bigint, name text, queue text, args jsonb, priority bigint, status text, attempts int,
  max_attempts int, lease_ms int, enqueued_at float8, run_at float8, started_at float8, finished_at float8, last_error text,
  finish_reason text, worker_id text, lease_id text, updated_at float8, limits text[],
  how text, acquired_at float8, expires_at float8, revoked_by text, revoked_at float8, revoke_cancels boolean, parked_at float8, park_seq bigint)`;

const keep = (bit: number, column: string, value: string) => `${column} = CASE WHEN x.m & ${bit} <> 0 THEN ${value} ELSE j.${column} END`;

// The rows as one JSON array ($1), their keys ($2, so the planner finds each by primary key,
// LATERAL-free: `job_id = ANY` then the join), their streams ($4: on a distributed ledger the
// shards to update, every shard otherwise), and how many there are ($3): a row the batch
// updates MUST exist (its job's JobEnqueued made it), and jl_expect_rows fails the batch when one
// is missing instead of losing the job silently. On the right of SET, j.* is the row before the
// update: a legacy yield hands the attempt back only if the row says its lease was started, and a
// job without further limits parks in its enqueue order (seq, as this batch leaves it).
export const UPDATE_JOBS_SQL = `
WITH updated AS (
UPDATE jl_jobs j SET
  ${keep(STATUS, 'status', 'x.status')},
  attempts = CASE WHEN x.m & ${ATTEMPTS} <> 0 THEN x.attempts ELSE j.attempts END
    - CASE WHEN x.yield_lease IS NOT NULL AND j.lease_id = x.yield_lease AND j.status = 'running' THEN 1 ELSE 0 END,
  ${keep(RUN_AT, 'run_at', ms('x.run_at'))},
  ${keep(STARTED_AT, 'started_at', ms('x.started_at'))},
  ${keep(FINISHED_AT, 'finished_at', ms('x.finished_at'))},
  ${keep(LAST_ERROR, 'last_error', 'x.last_error')},
  ${keep(FINISH_REASON, 'finish_reason', 'x.finish_reason')},
  ${keep(WORKER_ID, 'worker_id', 'x.worker_id')},
  ${keep(SLOT, 'lease_id', 'x.lease_id')},
  ${keep(SLOT, 'how', 'x.how')},
  ${keep(SLOT, 'acquired_at', ms('x.acquired_at'))},
  ${keep(SEQ, 'seq', 'x.seq')},
  ${keep(EXPIRES_AT, 'expires_at', ms('x.expires_at'))},
  ${keep(REVOKED, 'revoked_by', 'x.revoked_by')},
  ${keep(REVOKED, 'revoked_at', ms('x.revoked_at'))},
  ${keep(REVOKED, 'revoke_cancels', 'x.revoke_cancels')},
  ${keep(PARKED, 'parked_at', ms('x.parked_at'))},
  ${keep(PARKED, 'park_seq', `CASE WHEN x.parked_at IS NULL THEN NULL WHEN j.limits IS NULL THEN CASE WHEN x.m & ${SEQ} <> 0 THEN x.seq ELSE j.seq END ELSE x.parked_revision END`)},
  updated_at = coalesce(${ms('x.updated_at')}, j.updated_at)
FROM jsonb_to_recordset($1::jsonb) AS x (
  job_id text, m int, status text, attempts int, run_at float8, started_at float8, finished_at float8, last_error text,
  finish_reason text, worker_id text, lease_id text, how text, acquired_at float8, expires_at float8, revoked_by text, revoked_at float8,
  revoke_cancels boolean, parked_at float8, parked_revision bigint, seq bigint, yield_lease text, updated_at float8)
WHERE j.job_id = ANY ($2::text[]) AND j.job_id = x.job_id AND j.stream = ANY ($4::text[])
RETURNING 1
)
SELECT jl_expect_rows(count(*), $3::int, 'jl_jobs') FROM updated`;

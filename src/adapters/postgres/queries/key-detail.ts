import { keyStream } from '../../../domain/streams.js';
import { Key, checkField } from '../../../domain/values.js';
import type { Queryable } from '../../../projections/runner.js';
import { leaseStateOf } from './list-keys.js';
import { pauseJson, toPause, type KeyPause } from './pause.js';
import { quarantineJson, toQuarantine, type KeyQuarantine } from './quarantine.js';
import { epochMs, toMs } from './sql.js';

export interface Holder {
  readonly jobId: string;
  readonly name: string;
  readonly leaseId: string;
  readonly how: 'acquired' | 'promoted';
  readonly acquiredAt: number;
  /** null while no worker has started it (an admission has no expiry). */
  readonly expiresAt: number | null;
  readonly workerId: string | null;
  readonly startedAt: number | null;
  readonly attempt: number | null;
  /** unstarted: admitted, no worker has started it (no expiry); expired: its lease ran out by now (not yet reclaimed); live otherwise. */
  readonly leaseState: 'live' | 'expired' | 'unstarted';
}

export interface ParkedJob {
  readonly jobId: string;
  readonly name: string;
  readonly priority: number;
  readonly parkedAt: number;
}

export interface ScheduledJob {
  readonly jobId: string;
  readonly name: string;
  readonly runAt: number;
  readonly attempts: number;
}

export interface KeyDetail {
  readonly key: string;
  readonly limit: number;
  readonly leaseMs: number;
  /** Oldest admission first. */
  readonly holders: Holder[];
  /** In promotion order: priority, then enqueue order. */
  readonly parked: ParkedJob[];
  /** Soonest first. */
  readonly scheduled: ScheduledJob[];
  /** Non-null while an event of the key's stream does not decode: what is shown here is the key as it was before it. */
  readonly quarantine: KeyQuarantine | null;
  /** Non-null while an operator has the key paused: nothing new is admitted on it. */
  readonly paused: KeyPause | null;
}

// One statement, so holders, parked and scheduled jobs come from one snapshot: a job promoted
// between two separate reads would show up twice or not at all.
const SQL = /* sql */ `
SELECT k.key,
       k.concurrency_limit AS "limit",
       k.lease_ms AS "leaseMs",
       coalesce((
         SELECT json_agg(json_build_object(
                  'jobId', s.job_id, 'name', j.name, 'leaseId', s.lease_id, 'how', s.how,
                  'acquiredAt', ${epochMs('s.acquired_at')}, 'expiresAt', ${epochMs('s.expires_at')},
                  'workerId', s.worker_id, 'startedAt', ${epochMs('s.started_at')}, 'attempt', s.attempt)
                ORDER BY s.acquired_at, s.job_id)
         FROM jl_slots s JOIN jl_jobs j USING (job_id)
         WHERE s.stream = k.stream), '[]') AS holders,
       coalesce((
         SELECT json_agg(json_build_object('jobId', p.job_id, 'name', j.name, 'priority', p.priority, 'parkedAt', ${epochMs('p.parked_at')})
                ORDER BY p.priority, p.seq)
         FROM jl_parked p JOIN jl_jobs j USING (job_id)
         WHERE p.stream = k.stream), '[]') AS parked,
       coalesce((
         SELECT json_agg(json_build_object('jobId', j.job_id, 'name', j.name, 'runAt', ${epochMs('j.run_at')}, 'attempts', j.attempts)
                ORDER BY j.run_at, j.seq)
         FROM jl_jobs j
         WHERE j.stream = k.stream AND j.run_at IS NOT NULL), '[]') AS scheduled,
       ${quarantineJson('k.stream')} AS quarantine,
       ${pauseJson('k')} AS paused
FROM jl_keys k
WHERE k.stream = $1`;

interface Row {
  key: string;
  limit: number;
  leaseMs: number;
  holders: Omit<Holder, 'leaseState'>[];
  parked: ParkedJob[];
  scheduled: ScheduledJob[];
  quarantine: Parameters<typeof toQuarantine>[0];
  paused: KeyPause | null;
}

/** One key's holders, parked and scheduled jobs; null for a key never seen. Throws ValidationError('key') on a bad key. */
export const keyDetail = async (db: Queryable, key: string, now: number): Promise<KeyDetail | null> => {
  const { rows } = await db.query<Row>(SQL, [keyStream(checkField('key', Key, key))]);
  const row = rows[0];
  if (row === undefined) return null;
  return {
    key: row.key,
    limit: row.limit,
    leaseMs: row.leaseMs,
    holders: row.holders.map((h) => {
      const expiresAt = toMs(h.expiresAt);
      return { ...h, acquiredAt: toMs(h.acquiredAt), expiresAt, startedAt: toMs(h.startedAt), leaseState: expiresAt === null ? 'unstarted' : leaseStateOf(expiresAt, 1, now) === 'expired' ? 'expired' : 'live' };
    }),
    parked: row.parked.map((p) => ({ ...p, parkedAt: toMs(p.parkedAt) })),
    scheduled: row.scheduled.map((s) => ({ ...s, runAt: toMs(s.runAt) })),
    quarantine: toQuarantine(row.quarantine),
    paused: toPause(row.paused),
  };
};

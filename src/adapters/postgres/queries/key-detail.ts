import { KEY_STREAM_PREFIX, keyStream } from '../../../domain/streams.js';
import * as t from 'io-ts';
import { Key, checkField, refine } from '../../../domain/values.js';
import type { Queryable } from '../../../projections/transaction.js';
import { holderState, paramTime, type HolderState } from './holder-state.js';
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
  /** What it is doing (see HolderState): running on workerId, admitted and not started since acquiredAt, its lease expired, or its worker gone. */
  readonly state: HolderState;
  /**
   * The state in the words the page used before `state`: live (= running; never said of a holder
   * whose worker is gone), unstarted, expired, worker-gone. Kept for readers of the old field.
   */
  readonly leaseState: 'live' | 'expired' | 'unstarted' | 'worker-gone';
  /** When the lease was last renewed (or started: the first expiry counts from the start); null until started. */
  readonly renewedAt: number | null;
  /** The last heartbeat of its worker (workers.last_seen); null until started, and for a worker that never announced itself. */
  readonly workerLastSeen: number | null;
  /**
   * For a guest (a job of another stream under this key's limit): the key of its home, or its own
   * stream (job:<jobId>) for a job without a key; null for the key's own jobs. A guest's lease,
   * worker and attempt are its home's.
   */
  readonly home: string | null;
  /** The job's further limit keys besides its own key ([] when none); a guest's include this key. */
  readonly limits: string[];
  /** The job's own lease (ms): how long its worker may stay silent; a job may carry a lease other than its key's. */
  readonly leaseMs: number;
  /**
   * Non-null while the holder is stopping: an operator revoked its running lease (`cancels`: by
   * cancelling its job). Its handler is told to stop; the slot passes on when it has, or when the lease lapses.
   */
  readonly revoked: { readonly by: string; readonly at: number; readonly cancels: boolean } | null;
}

/** A limit a parked job waits on besides this key: full (inUse >= limit) or paused. */
export interface BlockingLimit {
  readonly key: string;
  readonly limit: number;
  readonly inUse: number;
  readonly paused: boolean;
}

export interface ParkedJob {
  readonly jobId: string;
  readonly name: string;
  readonly priority: number;
  readonly parkedAt: number;
  /** As Holder.home. */
  readonly home: string | null;
  /** As Holder.limits. */
  readonly limits: string[];
  /** Every OTHER limit of the job (a guest's home key, its further limits) that is full or paused now: what it waits on besides this key. */
  readonly waitsOn: BlockingLimit[];
}

export interface ScheduledJob {
  readonly jobId: string;
  readonly name: string;
  readonly runAt: number;
  readonly attempts: number;
}

/** How many of each list a key's detail holds at most, unless asked for another number (up to MAX_DETAIL_LIST). */
export const DEFAULT_DETAIL_LIST = 100;
export const MAX_DETAIL_LIST = 1000;

const DetailList = refine(t.number, 'DetailList', (n) => Number.isSafeInteger(n) && n >= 1 && n <= MAX_DETAIL_LIST, `must be an integer from 1 to ${MAX_DETAIL_LIST}`);

/** `listed` checked (ValidationError naming `limit`), DEFAULT_DETAIL_LIST for undefined. */
export const detailList = (listed: number | undefined): number => (listed === undefined ? DEFAULT_DETAIL_LIST : checkField('limit', DetailList, listed));

/** A key's jobs of each list, all of them (the lists show the first ones). */
export interface KeyDetailCounts {
  readonly holders: number;
  readonly parked: number;
  readonly scheduled: number;
  /** Of holders, the key's own jobs (not guests): what Release all frees. */
  readonly ownHolders: number;
  /** Of parked, the key's own jobs: what Discard all discards. */
  readonly ownParked: number;
}

export interface KeyDetail {
  readonly key: string;
  readonly limit: number;
  readonly leaseMs: number;
  /** Oldest admission first; the key's own jobs and its guests; the first `listed`. */
  readonly holders: Holder[];
  /** In promotion order: priority, then the order they joined the line in (own jobs and guests merged); the first `listed`. */
  readonly parked: ParkedJob[];
  /** Soonest first; the first `listed`. */
  readonly scheduled: ScheduledJob[];
  /** How many of each list there are: a list shorter than its count was cut at `listed`. */
  readonly counts: KeyDetailCounts;
  /** The most jobs each list holds (the query's, or DEFAULT_DETAIL_LIST). */
  readonly listed: number;
  /** Non-null while an event of the key's stream does not decode: what is shown here is the key as it was before it. */
  readonly quarantine: KeyQuarantine | null;
  /** Non-null while an operator has the key paused: nothing new is admitted on it. */
  readonly paused: KeyPause | null;
}

// One statement, so holders, parked and scheduled jobs come from one snapshot: a job promoted
// between two separate reads would show up twice or not at all. The same goes for the other keys
// a parked job waits on: read in the same snapshot, each once however many jobs wait on it. Each
// list is its first $3 rows and a count (a key with 3,000 parked jobs gave 323 KB a poll): what it
// reads beyond them is counted from the indexes.
const homeKey = (stream: string) =>
  `CASE WHEN ${stream} LIKE '${KEY_STREAM_PREFIX}%' THEN substr(${stream}, ${KEY_STREAM_PREFIX.length + 1}) ELSE ${stream} END`;

// $1: the key's stream, $2: now (epoch ms), $3: the most rows of each list. Reads jl_keys (jl_keys_pkey), jl_key_stats, jl_slots
// (jl_jobs_holders; guests' home slots by jl_jobs_pkey), jl_parked (jl_jobs_parked), jl_limit_jobs
// (jl_limit_jobs_pkey), jl_jobs (jl_jobs_pkey; scheduled ones by jl_jobs_stream), workers
// (workers_pkey) and jl_quarantined (jl_quarantined_pkey), each for this key alone.
export const KEY_DETAIL_SQL = /* sql */ `
WITH parked AS MATERIALIZED (
  SELECT * FROM (
    SELECT p.job_id, p.priority, p.seq, p.parked_at, NULL::text AS home FROM jl_parked p WHERE p.stream = $1
    UNION ALL
    SELECT g.job_id, g.priority, g.seq, g.since, g.home FROM jl_limit_jobs g WHERE g.stream = $1 AND g.status = 'parked'
  ) l
  ORDER BY l.priority, l.seq
  LIMIT $3::int
),
-- The key's guests that hold its slots, taken first: on Citus their home slots are then read by
-- job id on each shard, rather than every shard's holders sent to the coordinator to be joined.
guests AS MATERIALIZED (
  SELECT g.job_id, g.lease_id, g.since, g.home FROM jl_limit_jobs g WHERE g.stream = $1 AND g.status = 'holding'
),
holding AS MATERIALIZED (
  SELECT s.job_id, s.lease_id, s.how, s.acquired_at, s.expires_at, s.worker_id, s.started_at, s.attempt, NULL::text AS home, s.revoked_by, s.revoked_at, s.revoke_cancels
  FROM jl_slots s WHERE s.stream = $1
  UNION ALL
  -- A guest holds under its home's lease: its start, worker and expiry are the home slot's.
  SELECT g.job_id, g.lease_id, s.how, g.since, s.expires_at, s.worker_id, s.started_at, s.attempt, g.home, s.revoked_by, s.revoked_at, s.revoke_cancels
  FROM guests g JOIN jl_slots s ON s.job_id = g.job_id
),
-- Each parked job's other limits, in the order the job names them: a guest's home, then its limit
-- keys. Two branches, not one LATERAL union of both: Citus cannot push such a union down
-- (test/citus/reads.citus.test.ts, keyDetail).
others AS MATERIALIZED (
  SELECT p.job_id, p.home AS stream, 0::bigint AS n FROM parked p WHERE p.home IS NOT NULL AND p.home <> $1
  UNION ALL
  SELECT p.job_id, '${KEY_STREAM_PREFIX}' || u.key, u.n
  FROM parked p JOIN jl_jobs j USING (job_id) CROSS JOIN LATERAL unnest(j.limits) WITH ORDINALITY AS u (key, n)
  WHERE '${KEY_STREAM_PREFIX}' || u.key <> $1
),
blocking AS MATERIALIZED (
  SELECT ks.stream, ks.key, ks.concurrency_limit, ks.in_use, ks.paused_at IS NOT NULL AS paused
  FROM jl_key_stats ks
  WHERE ks.stream IN (SELECT stream FROM others) AND (ks.in_use >= ks.concurrency_limit OR ks.paused_at IS NOT NULL)
),
waits AS (
  SELECT o.job_id, json_agg(json_build_object('key', b.key, 'limit', b.concurrency_limit, 'inUse', b.in_use, 'paused', b.paused) ORDER BY o.n) AS waits_on
  FROM others o JOIN blocking b USING (stream)
  GROUP BY o.job_id
)
SELECT k.key,
       k.concurrency_limit AS "limit",
       k.lease_ms AS "leaseMs",
       coalesce((
         SELECT json_agg(json_build_object(
                  'jobId', h.job_id, 'name', j.name, 'leaseId', h.lease_id, 'how', h.how,
                  'acquiredAt', ${epochMs('h.acquired_at')}, 'expiresAt', ${epochMs('h.expires_at')},
                  'workerId', h.worker_id, 'startedAt', ${epochMs('h.started_at')}, 'attempt', h.attempt,
                  'home', ${homeKey('h.home')}, 'limits', coalesce(j.limits, '{}'),
                  'state', ${holderState('h', 'w', paramTime(2))},
                  -- A start and each renewal set the expiry a lease length ahead.
                  'renewedAt', ${epochMs(`h.expires_at - j.lease_ms * interval '1 millisecond'`)},
                  'workerLastSeen', ${epochMs('w.last_seen')},
                  'leaseMs', j.lease_ms,
                  'revoked', CASE WHEN h.revoked_by IS NOT NULL THEN json_build_object('by', h.revoked_by, 'at', ${epochMs('h.revoked_at')}, 'cancels', h.revoke_cancels) END)
                ORDER BY h.acquired_at, h.job_id)
         FROM (SELECT * FROM holding h ORDER BY h.acquired_at, h.job_id LIMIT $3::int) h JOIN jl_jobs j USING (job_id) LEFT JOIN workers w ON w.id = h.worker_id), '[]') AS holders,
       coalesce((
         SELECT json_agg(json_build_object(
                  'jobId', p.job_id, 'name', j.name, 'priority', p.priority, 'parkedAt', ${epochMs('p.parked_at')},
                  'home', ${homeKey('p.home')}, 'limits', coalesce(j.limits, '{}'), 'waitsOn', coalesce(w.waits_on, '[]'))
                ORDER BY p.priority, p.seq)
         FROM parked p JOIN jl_jobs j USING (job_id) LEFT JOIN waits w USING (job_id)), '[]') AS parked,
       coalesce((
         SELECT json_agg(json_build_object('jobId', j.job_id, 'name', j.name, 'runAt', ${epochMs('j.run_at')}, 'attempts', j.attempts)
                ORDER BY j.run_at, j.seq)
         FROM (SELECT * FROM jl_jobs j WHERE j.stream = k.stream AND j.run_at IS NOT NULL ORDER BY j.run_at, j.seq LIMIT $3::int) j), '[]') AS scheduled,
       json_build_object(
         'holders', (SELECT count(*) FROM holding),
         'ownHolders', (SELECT count(*) FROM holding WHERE home IS NULL),
         'parked', (SELECT count(*) FROM jl_parked p WHERE p.stream = k.stream) + (SELECT count(*) FROM jl_limit_jobs g WHERE g.stream = k.stream AND g.status = 'parked'),
         'ownParked', (SELECT count(*) FROM jl_parked p WHERE p.stream = k.stream),
         'scheduled', (SELECT count(*) FROM jl_jobs j WHERE j.stream = k.stream AND j.run_at IS NOT NULL)) AS counts,
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
  counts: KeyDetailCounts;
  quarantine: Parameters<typeof toQuarantine>[0];
  paused: KeyPause | null;
}

/**
 * One key's holders (each with its state), parked and scheduled jobs, the first `listed` of each
 * (default DEFAULT_DETAIL_LIST) with their counts; null for a key never seen. Leases are judged
 * expired on `now`, the ledger's clock (as in listKeys). Throws ValidationError naming `key` or
 * `limit` (1 to MAX_DETAIL_LIST).
 */
export const keyDetail = async (db: Queryable, key: string, now: number, listed: number = DEFAULT_DETAIL_LIST): Promise<KeyDetail | null> => {
  const stream = keyStream(checkField('key', Key, key));
  const { rows } = await db.query<Row>(KEY_DETAIL_SQL, [stream, now, detailList(listed)]);
  const row = rows[0];
  if (row === undefined) return null;
  return {
    key: row.key,
    limit: row.limit,
    leaseMs: row.leaseMs,
    holders: row.holders.map((h) => ({
      ...h,
      acquiredAt: toMs(h.acquiredAt),
      expiresAt: toMs(h.expiresAt),
      startedAt: toMs(h.startedAt),
      renewedAt: toMs(h.renewedAt),
      workerLastSeen: toMs(h.workerLastSeen),
      revoked: h.revoked === null ? null : { ...h.revoked, at: toMs(h.revoked.at)! },
      leaseState: h.state === 'running' ? 'live' : h.state,
    })),
    parked: row.parked.map((p) => ({ ...p, parkedAt: toMs(p.parkedAt) })),
    scheduled: row.scheduled.map((s) => ({ ...s, runAt: toMs(s.runAt) })),
    counts: row.counts,
    listed,
    quarantine: toQuarantine(row.quarantine),
    paused: toPause(row.paused),
  };
};

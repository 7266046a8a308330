import type { Queryable } from '../../../projections/transaction.js';
import { holderState, paramTime } from './holder-state.js';
import { quarantineJson, toQuarantine, type KeyQuarantine } from './quarantine.js';
import { pauseJson, toPause, type KeyPause } from './pause.js';
import { epochMs, toMs } from './sql.js';

/** A key's holders by state (see HolderState), its own and its guests. */
export interface HolderCounts {
  readonly running: number;
  readonly unstarted: number;
  readonly expired: number;
  readonly workerGone: number;
}

/**
 * The worst state among a key's holders, worst first: expired, worker-gone, unstarted, live (every
 * holder running on a live worker), none (no holder). `live` is never said of a key with a
 * holder nobody runs.
 */
export type LeaseState = 'expired' | 'worker-gone' | 'unstarted' | 'live' | 'none';

export interface KeyRow {
  readonly key: string;
  readonly limit: number;
  /** Slots held by the key's own jobs and by its guests (jobs of other streams under its limit). */
  readonly inUse: number;
  /** Jobs waiting in its line, its own and its guests. */
  readonly parked: number;
  readonly scheduled: number;
  readonly oldestParkedAt: number | null;
  readonly nextLeaseExpiry: number | null;
  readonly leaseState: LeaseState;
  /** The holders of inUse by state. */
  readonly holderStates: HolderCounts;
  /** When the longest-waiting unstarted holder was admitted; null when every holder is started. */
  readonly oldestUnstartedAt: number | null;
  /** inUse >= limit: a new job of the key would park. */
  readonly atLimit: boolean;
  /** Non-null while an event of the key's stream does not decode: its commands are refused and its jobs wait (see KeyQuarantine). */
  readonly quarantine: KeyQuarantine | null;
  /** Non-null while an operator has the key paused: nothing new is admitted on it. */
  readonly paused: KeyPause | null;
}

// The per-key rows both listings read (every key, here; a page of them, ./key-page.ts), as CTEs.
// $1: now (epoch ms, the ledger's clock). A guest holds under its home's slot: its state is that
// slot's. The figures are jl_key_stats' (its columns, the same counts), but taken once for every
// key: each kind of unfinished row is counted by stream in one pass (the holders by
// jl_jobs_holders, the parked jobs, the scheduled ones by jl_jobs_scheduled, the guests) and the
// counts joined to jl_keys by hash. Through jl_key_stats each key ran its nine subqueries, 90,000
// index probes at 10,000 keys (~170 ms a listing, measured by bench:reads); a whole listing is
// bounded by the unfinished jobs and the keys known, not by the finished jobs.
export const KEY_ROWS = /* sql */ `
holders AS (
  SELECT s.stream, s.worker_id, s.expires_at, s.acquired_at FROM jl_slots s
  UNION ALL
  SELECT g.stream, s.worker_id, s.expires_at, s.acquired_at FROM jl_limit_jobs g JOIN jl_slots s ON s.job_id = g.job_id WHERE g.status = 'holding'
),
states AS (
  SELECT h.stream, h.acquired_at, ${holderState('h', 'w', paramTime(1))} AS state
  FROM holders h LEFT JOIN workers w ON w.id = h.worker_id
),
counts AS (
  SELECT stream,
         count(*) FILTER (WHERE state = 'running')::int AS running,
         count(*) FILTER (WHERE state = 'unstarted')::int AS unstarted,
         count(*) FILTER (WHERE state = 'expired')::int AS expired,
         count(*) FILTER (WHERE state = 'worker-gone')::int AS worker_gone,
         min(acquired_at) FILTER (WHERE state = 'unstarted') AS oldest_unstarted_at
  FROM states GROUP BY stream
),
own_slots AS (
  SELECT stream, count(*)::int AS n, min(expires_at) AS next_expiry FROM jl_slots GROUP BY stream
),
own_parked AS (
  SELECT stream, count(*)::int AS n, min(parked_at) AS oldest FROM jl_parked GROUP BY stream
),
own_scheduled AS (
  SELECT stream, count(*)::int AS n FROM jl_jobs WHERE run_at IS NOT NULL GROUP BY stream
),
guests AS (
  SELECT g.stream, count(*) FILTER (WHERE g.status = 'holding')::int AS holding, count(*) FILTER (WHERE g.status = 'parked')::int AS parked,
         min(g.since) FILTER (WHERE g.status = 'parked') AS oldest, min(s.expires_at) AS next_expiry
  FROM jl_limit_jobs g LEFT JOIN jl_slots s ON g.status = 'holding' AND s.job_id = g.job_id
  WHERE g.status IN ('holding', 'parked')
  GROUP BY g.stream
),
rows AS (
  SELECT k.key, k.stream, k.concurrency_limit,
         coalesce(os.n, 0) + coalesce(g.holding, 0) AS in_use,
         coalesce(op.n, 0) + coalesce(g.parked, 0) AS parked,
         coalesce(sc.n, 0) AS scheduled,
         least(op.oldest, g.oldest) AS oldest_parked_at,
         least(os.next_expiry, g.next_expiry) AS next_lease_expiry,
         k.paused_at, k.paused_by, k.paused_reason,
         coalesce(c.running, 0) AS running, coalesce(c.unstarted, 0) AS unstarted, coalesce(c.expired, 0) AS expired,
         coalesce(c.worker_gone, 0) AS worker_gone, c.oldest_unstarted_at
  FROM jl_keys k
  LEFT JOIN own_slots os ON os.stream = k.stream
  LEFT JOIN own_parked op ON op.stream = k.stream
  LEFT JOIN own_scheduled sc ON sc.stream = k.stream
  LEFT JOIN guests g ON g.stream = k.stream
  LEFT JOIN counts c ON c.stream = k.stream
)`;

/** The select list of a KeyRow from a `rows` row `r`, its quarantine the JSON `quarantine` gives (toKeyRow finishes it). */
export const keyColumns = (quarantine: string): string => /* sql */ `
       r.key,
       r.concurrency_limit AS "limit",
       r.in_use AS "inUse",
       r.parked,
       r.scheduled,
       ${epochMs('r.oldest_parked_at')} AS "oldestParkedAt",
       ${epochMs('r.next_lease_expiry')} AS "nextLeaseExpiry",
       json_build_object('running', r.running, 'unstarted', r.unstarted, 'expired', r.expired, 'workerGone', r.worker_gone) AS "holderStates",
       ${epochMs('r.oldest_unstarted_at')} AS "oldestUnstartedAt",
       ${quarantine} AS quarantine,
       ${pauseJson('r')} AS paused`;

// Every key (KEY_ROWS), by key.
export const LIST_KEYS_SQL = /* sql */ `
WITH ${KEY_ROWS}
SELECT ${keyColumns(quarantineJson('r.stream'))}
FROM rows r
ORDER BY r.key`;

export type Row = Omit<KeyRow, 'leaseState' | 'atLimit' | 'quarantine'> & { readonly quarantine: Parameters<typeof toQuarantine>[0] };

export const leaseStateOf = (c: HolderCounts): LeaseState =>
  c.expired > 0 ? 'expired' : c.workerGone > 0 ? 'worker-gone' : c.unstarted > 0 ? 'unstarted' : c.running > 0 ? 'live' : 'none';

export const toKeyRow = (r: Row): KeyRow => ({
  ...r,
  oldestParkedAt: toMs(r.oldestParkedAt),
  nextLeaseExpiry: toMs(r.nextLeaseExpiry),
  oldestUnstartedAt: toMs(r.oldestUnstartedAt),
  leaseState: leaseStateOf(r.holderStates),
  atLimit: r.inUse >= r.limit,
  quarantine: toQuarantine(r.quarantine),
  paused: toPause(r.paused),
});

/**
 * Every concurrency key with its limit, use, holders by state and waits (jl_key_stats), ordered
 * by key. Leases are judged expired on `now`, the ledger's clock, not the database's: the sweeper
 * decides expiry on that clock, so a lease shown expired is one the sweeper will reclaim.
 */
export const listKeys = async (db: Queryable, now: number): Promise<KeyRow[]> => {
  const { rows } = await db.query<Row>(LIST_KEYS_SQL, [now]);
  return rows.map(toKeyRow);
};

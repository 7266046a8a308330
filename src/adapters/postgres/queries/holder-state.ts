import { workerLive } from './workers.js';

// What a holder (a jl_slots row) is doing, from its lease and its worker's presence: the keys
// list, the key detail and /metrics judge it by this one expression, so they never disagree.

/**
 * running: started, its lease not run out, its worker live; unstarted: admitted, no worker has
 * started it (an admission holds its slot without expiry until a worker reads it);
 * expired: its lease ran out (the sweeper has not reclaimed it yet); worker-gone: started, its
 * lease not run out yet, but its worker is gone (killed, stopped, or never announced itself):
 * nobody runs it, and the sweeper reclaims it when the lease runs out.
 */
export const HOLDER_STATES = ['running', 'unstarted', 'expired', 'worker-gone'] as const;
export type HolderState = (typeof HOLDER_STATES)[number];

/**
 * SQL: the state of the jl_slots row `s`, whose worker's row (workers, LEFT JOINed on
 * s.worker_id) is `w`; a lease has run out when its expiry is at or before `now` (a timestamptz
 * expression: the ledger's clock, the one the sweeper expires leases by).
 */
export const holderState = (s: string, w: string, now: string): string =>
  `CASE WHEN ${s}.worker_id IS NULL THEN 'unstarted' WHEN ${s}.expires_at <= ${now} THEN 'expired' WHEN ${workerLive(w)} THEN 'running' ELSE 'worker-gone' END`;

/** SQL: epoch ms in the query parameter `$n` as a timestamptz. */
export const paramTime = (n: number): string => `to_timestamp($${n}::float8 / 1000)`;

/**
 * SQL: the instant before which an admission nobody started has waited too long: `now` (a
 * timestamptz expression) less `afterMs` (a float8 expression, ms). The keys' attention and the
 * polls' version judge it alike.
 */
export const unstartedBefore = (now: string, afterMs: string): string => `${now} - ${afterMs} * interval '1 millisecond'`;

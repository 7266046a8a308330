import type { Queryable } from '../../../projections/transaction.js';
import { epochMs, toMs } from './sql.js';

// The workers' presence (the workers table, migration 0009; written by
// src/adapters/worker/presence.ts). Live and gone are judged here, on the database's clock, the
// clock the heartbeats write: a worker's own host clock never enters into it.

/** Heartbeats a worker may miss before it is called gone: one late beat (a GC pause, a slow commit) is not a death. */
export const WORKER_LIVE_BEATS = 3;

/** SQL: whether the workers row `w` is live now (false for a NULL row: a worker that never announced itself is not live). */
export const workerLive = (w: string): string =>
  `coalesce(${w}.stopped_at IS NULL AND ${w}.last_seen > statement_timestamp() - ${WORKER_LIVE_BEATS} * ${w}.heartbeat_ms * interval '1 millisecond', false)`;

export type WorkerState = 'live' | 'gone';

export interface WorkerRow {
  readonly id: string;
  readonly host: string;
  readonly pid: number;
  readonly queue: string;
  readonly concurrency: number;
  /** Its heartbeat period: it is gone once WORKER_LIVE_BEATS of these pass unseen. */
  readonly heartbeatMs: number;
  /** Epoch ms, like every time here (the database's clock). */
  readonly startedAt: number;
  readonly lastSeen: number;
  /** How long ago its last heartbeat was, measured by the database (no client clock involved). */
  readonly seenAgoMs: number;
  /** Jobs it was running at its last heartbeat. */
  readonly running: number;
  /** Set when it stopped gracefully; null while running, and for a worker that died. */
  readonly stoppedAt: number | null;
  /** live: seen within WORKER_LIVE_BEATS heartbeats and not stopped; gone otherwise. */
  readonly state: WorkerState;
  /** Slots held now under leases it started (jl_slots.worker_id): a gone worker's are holders nobody runs. */
  readonly holding: number;
}

export const LIST_WORKERS_SQL = /* sql */ `
SELECT w.id, w.host, w.pid, w.queue, w.concurrency, w.heartbeat_ms AS "heartbeatMs",
       ${epochMs('w.started_at')} AS "startedAt",
       ${epochMs('w.last_seen')} AS "lastSeen",
       greatest(extract(epoch FROM statement_timestamp() - w.last_seen) * 1000, 0)::float8 AS "seenAgoMs",
       w.running,
       ${epochMs('w.stopped_at')} AS "stoppedAt",
       CASE WHEN ${workerLive('w')} THEN 'live' ELSE 'gone' END AS state,
       coalesce(h.n, 0)::int AS holding
FROM workers w
-- One pass over the holders for all workers (jl_slots has no index on worker_id; it holds only the slots held now).
LEFT JOIN (SELECT worker_id, count(*) AS n FROM jl_slots WHERE worker_id IS NOT NULL GROUP BY worker_id) h ON h.worker_id = w.id
ORDER BY ${workerLive('w')} DESC, w.queue, w.started_at, w.id`;

/** Every worker seen within the last day (older rows are pruned), live ones first, then by queue and start. */
export const listWorkers = async (db: Queryable): Promise<WorkerRow[]> => {
  const { rows } = await db.query<WorkerRow>(LIST_WORKERS_SQL);
  return rows.map((w) => ({ ...w, startedAt: toMs(w.startedAt), lastSeen: toMs(w.lastSeen), seenAgoMs: toMs(w.seenAgoMs), stoppedAt: toMs(w.stoppedAt) }));
};

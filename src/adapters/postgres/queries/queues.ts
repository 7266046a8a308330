import type { Queryable } from '../../../projections/transaction.js';
import { epochMs, toMs } from './sql.js';
import { workerLive } from './workers.js';

// Per dispatch queue, what an operator asks in an incident: is work waiting, since when, and is
// anyone reading it. One statement over the jobs' rows (a queue's messages are its admitted jobs
// nobody started, migration 0015) and the workers' presence (0009); ages on the database's clock.

export interface QueueRow {
  readonly queue: string;
  /** Its messages: jobs holding a slot, waiting to be claimed or running. */
  readonly depth: number;
  /** Admitted jobs nobody has started: what a read would claim now. */
  readonly visibleNow: number;
  /** Age of the oldest admission waiting to be claimed, null when none waits. */
  readonly oldestAgeMs: number | null;
  /** When that admission was made (epoch ms, the ledger's clock, as every time of the read models); null when none waits. */
  readonly oldestAt: number | null;
  /** Live workers reading the queue. */
  readonly consumers: number;
  /** Handlers those live workers run at once, summed: the queue's capacity now. */
  readonly capacity: number;
}

// Every queue with a job holding a slot (waiting or running), and every queue a live worker reads
// (one it reads may have nothing). The counts walk the holders' partial indexes (jl_jobs_claim:
// (queue, acquired_at) of the waiting ones), so they cost what is in flight, not the history.
export const LIST_QUEUES_SQL = /* sql */ `
WITH live AS (
  SELECT w.queue, count(*)::int AS consumers, sum(w.concurrency)::int AS capacity
  FROM workers w WHERE ${workerLive('w')} GROUP BY w.queue
),
held AS (
  SELECT queue,
         count(*)::int AS depth,
         (count(*) FILTER (WHERE status = 'holding'))::int AS visible_now,
         min(acquired_at) FILTER (WHERE status = 'holding') AS oldest
  FROM jl_jobs WHERE status IN ('holding', 'running') GROUP BY queue
)
SELECT coalesce(h.queue, l.queue) AS queue,
       coalesce(h.depth, 0) AS depth,
       coalesce(h.visible_now, 0) AS "visibleNow",
       -- NULL when nothing waits: greatest() skips a NULL and would say 0.
       CASE WHEN h.oldest IS NOT NULL THEN greatest(extract(epoch FROM statement_timestamp() - h.oldest) * 1000, 0)::float8 END AS "oldestAgeMs",
       ${epochMs('h.oldest')} AS "oldestAt",
       coalesce(l.consumers, 0) AS consumers,
       coalesce(l.capacity, 0) AS capacity
FROM held h FULL JOIN live l USING (queue)
ORDER BY 1`;

/** Every dispatch queue with work in flight or a live worker, with its depth, what waits and since when, and who reads it, by name. */
export const listQueues = async (db: Queryable): Promise<QueueRow[]> => {
  const { rows } = await db.query<QueueRow>(LIST_QUEUES_SQL);
  return rows.map((q) => ({ ...q, oldestAgeMs: q.oldestAgeMs === null ? null : Math.round(q.oldestAgeMs), oldestAt: toMs(q.oldestAt) }));
};

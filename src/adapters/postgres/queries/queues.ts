import type { Queryable } from '../../../projections/transaction.js';
import { workerLive } from './workers.js';

// Per dispatch queue, what an operator asks in an incident: is work waiting, since when, and is
// anyone reading it. One statement over the queue tables (migration 0002) and the workers'
// presence (0009); ages on the database's clock, the clock the queue's times are written by.

export interface QueueRow {
  readonly queue: string;
  /** Messages in the queue, visible or not (in flight, delayed). */
  readonly depth: number;
  /** Messages a read would get now. */
  readonly visibleNow: number;
  /** Age of the oldest message (by enqueued_at), null when empty. */
  readonly oldestAgeMs: number | null;
  /** Live workers reading the queue. */
  readonly consumers: number;
  /** Handlers those live workers run at once, summed: the queue's capacity now. */
  readonly capacity: number;
}

// Every queue ever sent to, and every queue a live worker reads (one it reads may never have
// had a message). The message counts walk queue_messages_read (queue, vt, msg_id).
export const LIST_QUEUES_SQL = /* sql */ `
WITH live AS (
  SELECT w.queue, count(*)::int AS consumers, sum(w.concurrency)::int AS capacity
  FROM workers w WHERE ${workerLive('w')} GROUP BY w.queue
),
names AS (SELECT name AS queue FROM queues UNION SELECT queue FROM live)
SELECT n.queue,
       m.depth,
       m.visible_now AS "visibleNow",
       m.oldest_age_ms AS "oldestAgeMs",
       coalesce(l.consumers, 0) AS consumers,
       coalesce(l.capacity, 0) AS capacity
FROM names n
LEFT JOIN live l USING (queue)
CROSS JOIN LATERAL (
  SELECT count(*)::int AS depth,
         (count(*) FILTER (WHERE q.vt <= statement_timestamp()))::int AS visible_now,
         greatest(extract(epoch FROM statement_timestamp() - min(q.enqueued_at)) * 1000, 0)::float8 AS oldest_age_ms
  FROM queue_messages q WHERE q.queue = n.queue
) m
ORDER BY n.queue`;

/** Every dispatch queue (sent to, or read by a live worker) with its depth, oldest message and consumers, by name. */
export const listQueues = async (db: Queryable): Promise<QueueRow[]> => {
  const { rows } = await db.query<QueueRow>(LIST_QUEUES_SQL);
  return rows.map((q) => ({ ...q, oldestAgeMs: q.oldestAgeMs === null ? null : Math.round(q.oldestAgeMs) }));
};

import type pg from 'pg';
import { inTransaction } from '../../projections/transaction.js';

// Retention: the events of jobs that finished before a cut move from `events` to
// `events_archive` (migration 0010), stream by stream, a few streams per transaction. Every
// reader of history reads both tables (the view ledger_events), so a key's state, `state --at`,
// the audit and `replay --verify` answer as before; the live table keeps the work in flight and
// each key's own events (limits, pauses), whatever their age.

/** jl_jobs statuses of a job that will not run again by itself (a dead job may be retried: its events are read back from the archive). */
const FINISHED = ['completed', 'dead', 'cancelled', 'discarded'];

export interface ArchiveOptions {
  /** Epoch ms: jobs that finished before it are archived. */
  readonly before: number;
  /** Count what would move, move nothing. */
  readonly dryRun?: boolean;
  /** Streams per transaction (default 50): each holds those streams' write locks while it moves their rows. */
  readonly streamsPerBatch?: number;
  /** Told after each batch: what has moved so far. */
  readonly progress?: (sofar: Moved) => void;
}

export interface Moved {
  /** Jobs whose events moved (each counted once, by its JobEnqueued). */
  readonly jobs: number;
  readonly events: number;
  /** Size of their data and metadata (pg_column_size), before compression of the archive's pages. */
  readonly bytes: number;
  /** Streams that had events moved. */
  readonly streams: number;
}

export interface ArchiveResult extends Moved {
  /** Events left in the live table (for a dry run: that would be left). */
  readonly liveEvents: number;
}

// The next $2 distinct streams of the live table after $1, by a loose index scan of its primary
// key: the work is the number of live streams, not of live events.
const NEXT_STREAMS_SQL = `
WITH RECURSIVE s (stream, n) AS (
  (SELECT stream, 1 FROM events WHERE stream > $1 ORDER BY stream LIMIT 1)
  UNION ALL
  SELECT (SELECT e.stream FROM events e WHERE e.stream > s.stream ORDER BY e.stream LIMIT 1), s.n + 1
  FROM s WHERE s.stream IS NOT NULL AND s.n < $2
)
SELECT stream FROM s WHERE stream IS NOT NULL`;

// The streams' rows, in name order, as the key writer takes them (LOCK_SQL): the move and a
// flush on the same keys queue up instead of deadlocking, and a flush never reads a stream
// while its rows are half moved.
const LOCK_STREAMS_SQL = `SELECT stream FROM streams WHERE stream = ANY($1::text[]) ORDER BY stream FOR UPDATE`;

// Every event of these streams ($1) that names a job finished before $2 (epoch ms): on its home
// stream and, for a job under further limits, on each limit key (the guest events name it too).
const DOOMED = `
  FROM events e JOIN jl_jobs j ON j.job_id = e.data ->> 'jobId'
  WHERE e.stream = ANY($1::text[]) AND j.status = ANY($3::text[]) AND j.finished_at < to_timestamp($2::float8 / 1000)`;

const COUNT_SQL = `
SELECT count(*) FILTER (WHERE e.type = 'JobEnqueued')::int AS jobs, count(*)::int AS events,
       coalesce(sum(pg_column_size(e.data) + pg_column_size(e.metadata)), 0)::float8 AS bytes, count(DISTINCT e.stream)::int AS streams
${DOOMED}`;

// This MUST stay one statement: the rows leave events and enter events_archive in the same
// step, so no reader (each statement sees one snapshot of both tables) finds an event twice or
// not at all; streams.archived_revision tells the key writer's lock to read the archive too
// for a state built from before it.
const MOVE_SQL = `
WITH doomed AS (SELECT e.stream, e.stream_revision ${DOOMED}),
moved AS (
  DELETE FROM events e USING doomed d WHERE e.stream = d.stream AND e.stream_revision = d.stream_revision
  RETURNING e.global_position, e.transaction_id, e.stream, e.stream_revision, e.type, e.data, e.metadata, e.event_id, e.created
),
archived AS (
  INSERT INTO events_archive (global_position, transaction_id, stream, stream_revision, type, data, metadata, event_id, created)
  SELECT * FROM moved
  RETURNING stream, stream_revision, type, pg_column_size(data) + pg_column_size(metadata) AS bytes
),
marked AS (
  UPDATE streams s SET archived_revision = greatest(coalesce(s.archived_revision, -1), a.revision)
  FROM (SELECT stream, max(stream_revision) AS revision FROM archived GROUP BY stream) a
  WHERE s.stream = a.stream
  RETURNING s.stream
)
SELECT (SELECT count(*) FILTER (WHERE type = 'JobEnqueued') FROM archived)::int AS jobs, (SELECT count(*) FROM archived)::int AS events,
       (SELECT coalesce(sum(bytes), 0) FROM archived)::float8 AS bytes, (SELECT count(*) FROM marked)::int AS streams`;

/** Moves (or, dry, counts) the events of the jobs that finished before `before`. */
export const archiveFinishedJobs = async (pool: pg.Pool, options: ArchiveOptions): Promise<ArchiveResult> => {
  const batch = options.streamsPerBatch ?? 50;
  const total = { jobs: 0, events: 0, bytes: 0, streams: 0 };
  let after = '';
  for (;;) {
    const streams = (await pool.query<{ stream: string }>(NEXT_STREAMS_SQL, [after, batch])).rows.map((r) => r.stream);
    if (streams.length === 0) break;
    after = streams.at(-1)!;
    const params = [streams, options.before, FINISHED];
    const moved = options.dryRun
      ? (await pool.query<Moved>(COUNT_SQL, params)).rows[0]!
      : await inTransaction(pool, async (client) => {
          await client.query(LOCK_STREAMS_SQL, [streams]);
          return (await client.query<Moved>(MOVE_SQL, params)).rows[0]!;
        });
    total.jobs += moved.jobs;
    total.events += moved.events;
    total.bytes += moved.bytes;
    total.streams += moved.streams;
    options.progress?.({ ...total });
  }
  const live = (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;
  return { ...total, liveEvents: options.dryRun ? live - total.events : live };
};

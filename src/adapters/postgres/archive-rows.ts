import type pg from 'pg';
import { inTransaction } from '../../projections/transaction.js';
import { ADVISORY_SQL, LOCK_ROWS_SQL, isJobStream } from '../eventstore/postgres/stream-sql.js';

// Retention row by row (migrations 0010 and 0016): the rows of jobs that finished before a cut
// move from `appends` to `appends_archive`, stream by stream, a few streams per transaction: what
// `archive --exact` does for the rows of the weeks not archived whole (./archive-weeks.ts). A row
// holds one append (on a key stream, the events
// of several jobs): it moves only when every one of its events names a job finished before the
// cut. The shared pieces of both ways are here.

/** jl_jobs statuses of a job that will not run again by itself (a dead job may be retried: its events are read back from the archive). */
export const FINISHED = ['completed', 'dead', 'cancelled', 'discarded'];

export interface Moved {
  /** Jobs some of whose events on their home stream moved (each counted once a batch: streams are batched whole). */
  readonly jobs: number;
  readonly events: number;
  /** Size of their rows' data and metadata (pg_column_size), before compression of the archive's pages. */
  readonly bytes: number;
  /** Streams that had events moved. */
  readonly streams: number;
}

/**
 * Whether the row `a` is archivable: every one of its events names a job finished before `before`
 * (epoch ms) — on its home stream and, for a job under further limits, on each limit key (the
 * guest events name it too). An event that names no job (a key's own: its limit, a pause) keeps
 * its row live. `finished`: the statuses of FINISHED.
 */
export const doomedRow = (before: string, finished: string): string => `NOT EXISTS (
    SELECT FROM jsonb_array_elements(a.data) AS f (d)
    LEFT JOIN jl_jobs j ON j.job_id = f.d ->> 'jobId' AND j.status = ANY(${finished}::text[]) AND j.finished_at < to_timestamp(${before}::float8 / 1000)
    WHERE j.job_id IS NULL)`;

/** The figures of a set of rows (`rows`: stream, data, events, bytes): what moved, or would. A job counts on its home stream. */
export const MOVED_FIGURES = (rows: string): string => `
SELECT (SELECT count(DISTINCT j.job_id) FROM ${rows} CROSS JOIN LATERAL jsonb_array_elements(${rows}.data) AS f (d) JOIN jl_jobs j ON j.job_id = f.d ->> 'jobId' AND j.stream = ${rows}.stream)::int AS jobs,
       (SELECT coalesce(sum(events), 0) FROM ${rows})::int AS events,
       (SELECT coalesce(sum(bytes), 0) FROM ${rows})::float8 AS bytes,
       (SELECT count(DISTINCT stream) FROM ${rows})::int AS streams`;

export const ROW_FIGURES = `a.stream, a.data, cardinality(a.types) AS events, pg_column_size(a.data) + pg_column_size(a.metadata) + coalesce(pg_column_size(a.metadatas), 0) AS bytes`;

// The next $2 distinct streams of the live table after $1, by a loose index scan of its primary
// key: the work is the number of live streams, not of live rows.
const NEXT_STREAMS_SQL = `
WITH RECURSIVE s (stream, n) AS (
  (SELECT stream, 1 FROM appends WHERE stream > $1 ORDER BY stream LIMIT 1)
  UNION ALL
  SELECT (SELECT a.stream FROM appends a WHERE a.stream > s.stream ORDER BY a.stream LIMIT 1), s.n + 1
  FROM s WHERE s.stream IS NOT NULL AND s.n < $2
)
SELECT stream FROM s WHERE stream IS NOT NULL`;

// The archivable rows of these streams ($1) of the weeks from $4 on (those before leave whole,
// ./archive-weeks.ts: a dry run must not count them twice); $2: the cut, $3: FINISHED.
const DOOMED = `FROM appends a WHERE a.stream = ANY($1::text[]) AND a.week >= $4::date AND ${doomedRow('$2', '$3')}`;

export const COUNT_ROWS_SQL = `WITH doomed AS (SELECT ${ROW_FIGURES} ${DOOMED}) ${MOVED_FIGURES('doomed')}`;

// This MUST stay one statement: the rows leave appends and enter appends_archive in the same
// step, so no reader (each statement sees one snapshot of both tables) finds an event twice or
// not at all, and a job stream's writer (which checks its last row in either table) always sees
// it; streams.archived_revision tells the key writer's lock to read the archive too for a state
// built from before it (a job stream's lock finds its live rows start later). Guarded by
// test/adapters/postgres/archive.int.test.ts (no reader's answer changes across the move).
const MOVE_SQL = `
WITH doomed AS (SELECT a.stream, a.revision, a.week ${DOOMED}),
moved AS (
  DELETE FROM appends a USING doomed d WHERE a.stream = d.stream AND a.revision = d.revision AND a.week = d.week
  RETURNING a.position, a.transaction_id, a.stream, a.revision, a.types, a.ids, a.data, a.metadata, a.metadatas, a.created
),
archived AS (
  INSERT INTO appends_archive AS a (position, transaction_id, stream, revision, types, ids, data, metadata, metadatas, created, week, archived)
  SELECT *, '-infinity'::date, statement_timestamp() FROM moved
  RETURNING a.last_revision, ${ROW_FIGURES}
),
marked AS (
  UPDATE streams s SET archived_revision = greatest(coalesce(s.archived_revision, -1), a.revision)
  FROM (SELECT stream, max(last_revision) AS revision FROM archived GROUP BY stream) a
  WHERE s.stream = a.stream
)
${MOVED_FIGURES('archived')}`;

export interface RowsOptions {
  readonly before: number;
  /** The Monday from which rows are moved one by one: the weeks before it are archived whole. */
  readonly weeksFrom: string;
  readonly dryRun: boolean;
  readonly streamsPerBatch: number;
  readonly progress: (moved: Moved) => void;
}

/** Moves (or, dry, counts) the archivable rows, stream by stream. */
export const archiveRows = async (pool: pg.Pool, options: RowsOptions): Promise<Moved> => {
  const total = { jobs: 0, events: 0, bytes: 0, streams: 0 };
  let after = '';
  for (;;) {
    const streams = (await pool.query<{ stream: string }>(NEXT_STREAMS_SQL, [after, options.streamsPerBatch])).rows.map((r) => r.stream);
    if (streams.length === 0) break;
    after = streams.at(-1)!;
    const params = [streams, options.before, FINISHED, options.weeksFrom];
    const moved = options.dryRun
      ? (await pool.query<Moved>(COUNT_ROWS_SQL, params)).rows[0]!
      : await inTransaction(pool, async (client) => {
          // The key writer's lock order (stream-sql.ts): job streams' advisory locks, then the rows
          // of the others. The move and a flush on the same streams queue up instead of
          // deadlocking, and a flush never reads a stream while its rows are half moved.
          const jobs = streams.filter(isJobStream);
          if (jobs.length > 0) await client.query(ADVISORY_SQL, [jobs]);
          await client.query(LOCK_ROWS_SQL, [streams.filter((s) => !isJobStream(s))]);
          return (await client.query<Moved>(MOVE_SQL, params)).rows[0]!;
        });
    total.jobs += moved.jobs;
    total.events += moved.events;
    total.bytes += moved.bytes;
    total.streams += moved.streams;
    options.progress({ ...total });
  }
  return total;
};

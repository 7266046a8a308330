import type pg from 'pg';
import { inTransaction } from '../../projections/transaction.js';
import { ADVISORY_SQL, LOCK_ROWS_SQL, isJobStream } from '../eventstore/postgres/stream-sql.js';

// Retention: the rows of jobs that finished before a cut move from `appends` to
// `appends_archive` (migrations 0010 and 0016), stream by stream, a few streams per transaction.
// A row holds one append (on a key stream, the events of several jobs): it moves only when every
// one of its events names a job finished before the cut. Every reader of history reads both
// tables (the view ledger_appends), so a key's state, `state --at`, the audit and `replay
// --verify` answer as before; the live table keeps the work in flight and each key's own events
// (limits, pauses), whatever their age, with the rows they share.

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
  /** Jobs some of whose events on their home stream moved (each counted once a batch: streams are batched whole). */
  readonly jobs: number;
  readonly events: number;
  /** Size of their rows' data and metadata (pg_column_size), before compression of the archive's pages. */
  readonly bytes: number;
  /** Streams that had events moved. */
  readonly streams: number;
}

export interface ArchiveResult extends Moved {
  /** Events left in the live table (for a dry run: that would be left). */
  readonly liveEvents: number;
}

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

// Every row of these streams ($1) all of whose events name a job finished before $2 (epoch ms):
// on its home stream and, for a job under further limits, on each limit key (the guest events
// name it too). An event that names no job (a key's own: its limit, a pause) keeps its row live.
const DOOMED = `
  FROM appends a
  WHERE a.stream = ANY($1::text[]) AND NOT EXISTS (
    SELECT FROM jsonb_array_elements(a.data) AS f (d)
    LEFT JOIN jl_jobs j ON j.job_id = f.d ->> 'jobId' AND j.status = ANY($3::text[]) AND j.finished_at < to_timestamp($2::float8 / 1000)
    WHERE j.job_id IS NULL)`;

/** The figures of a set of rows (`rows`: stream, data, events, bytes): what moved, or would. A job counts on its home stream. */
const MOVED_FIGURES = (rows: string) => `
SELECT (SELECT count(DISTINCT j.job_id) FROM ${rows} CROSS JOIN LATERAL jsonb_array_elements(${rows}.data) AS f (d) JOIN jl_jobs j ON j.job_id = f.d ->> 'jobId' AND j.stream = ${rows}.stream)::int AS jobs,
       (SELECT coalesce(sum(events), 0) FROM ${rows})::int AS events,
       (SELECT coalesce(sum(bytes), 0) FROM ${rows})::float8 AS bytes,
       (SELECT count(DISTINCT stream) FROM ${rows})::int AS streams`;

const ROW_FIGURES = `a.stream, a.data, cardinality(a.types) AS events, pg_column_size(a.data) + pg_column_size(a.metadata) + coalesce(pg_column_size(a.metadatas), 0) AS bytes`;

const COUNT_SQL = `WITH doomed AS (SELECT ${ROW_FIGURES} ${DOOMED}) ${MOVED_FIGURES('doomed')}`;

// This MUST stay one statement: the rows leave appends and enter appends_archive in the same
// step, so no reader (each statement sees one snapshot of both tables) finds an event twice or
// not at all, and a job stream's writer (which checks its last row in either table) always sees
// it; streams.archived_revision tells the key writer's lock to read the archive too for a state
// built from before it (a job stream's lock finds its live rows start later). Guarded by
// test/adapters/postgres/archive.int.test.ts (no reader's answer changes across the move).
const MOVE_SQL = `
WITH doomed AS (SELECT a.stream, a.revision ${DOOMED}),
moved AS (
  DELETE FROM appends a USING doomed d WHERE a.stream = d.stream AND a.revision = d.revision
  RETURNING a.position, a.transaction_id, a.stream, a.revision, a.types, a.ids, a.data, a.metadata, a.metadatas, a.created
),
archived AS (
  INSERT INTO appends_archive AS a (position, transaction_id, stream, revision, types, ids, data, metadata, metadatas, created)
  SELECT * FROM moved
  RETURNING a.last_revision, ${ROW_FIGURES}
),
marked AS (
  UPDATE streams s SET archived_revision = greatest(coalesce(s.archived_revision, -1), a.revision)
  FROM (SELECT stream, max(last_revision) AS revision FROM archived GROUP BY stream) a
  WHERE s.stream = a.stream
)
${MOVED_FIGURES('archived')}`;

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
    options.progress?.({ ...total });
  }
  const live = (await pool.query<{ n: number }>('SELECT coalesce(sum(cardinality(types)), 0)::int AS n FROM appends')).rows[0]!.n;
  return { ...total, liveEvents: options.dryRun ? live - total.events : live };
};

import type { Migration } from './migration.js';

// Issue 23: a job's events found by its id, not by reading its streams whole. A key's stream may
// hold a million events; one job has a few of them (its arrival, admission, starts, renewals,
// ending; and its guest events on its limit keys). Each row of appends carries the events of one
// append, of one job or of several (a completion that promotes the next job, an enqueue of many),
// so the index is on the job ids a row names: a GIN index on an expression, with no column of its
// own and nothing for a writer to fill in.
// - Only rows of key streams (and limit keys, and queue caps): a job stream (job:<id>) is the
//   job's alone and is read whole (its primary key).
// - GIN's pending list takes an insert without touching the index's tree (fastupdate, the
//   default); vacuum or a full list merges it. The write path pays the expression and one
//   pending-list entry per row, measured in the closing note of issue 23.
// - The function's COST is high on purpose: it walks every event of a row, and at the default
//   cost the planner preferred evaluating it on each row of a stream to the index.
// - On appends_archive too: archived jobs keep their history readable, and a week archive
//   detaches from appends keeps its index when attached there (ATTACH matches it by definition).
//
// And one statistic: jl_limit_jobs.stream is read one stream at a time (jl_key_stats' counts of a
// key's guests, for every key the page lists and every stream the sweeper looks at), with the
// stream a parameter, so the planner's estimate is rows / n_distinct. A queue cap puts every job of
// its queue on one stream: n_distinct 1, "every row matches", a sequential scan of the table for
// each key (measured at 10,003 keys and a cap of 20,000 jobs: jl_key_stats 19.8 s, the sweeper's
// candidates 16 s a tick). Declaring the column as distinct as half its rows (applied at its next
// ANALYZE) keeps those reads on the primary key: 0.1 s and 0.03 s.
export const jobIndex: Migration = {
  version: 18,
  name: 'job-index',
  sql: /* sql */ `
CREATE FUNCTION jl_job_ids(data jsonb) RETURNS text[] LANGUAGE sql IMMUTABLE PARALLEL SAFE COST 10000 AS $$
  SELECT coalesce(array_agg(DISTINCT e->>'jobId') FILTER (WHERE e ? 'jobId'), '{}') FROM jsonb_array_elements(data) e
$$;
COMMENT ON FUNCTION jl_job_ids(jsonb) IS 'The job ids an appends row''s events name (their data''s jobId), each once: what appends_job_ids indexes (see migration 18).';

CREATE INDEX appends_job_ids ON appends USING gin (jl_job_ids(data)) WHERE NOT starts_with(stream, 'job:');
COMMENT ON INDEX appends_job_ids IS
  'A job''s rows on key streams by its id (jl_job_ids(data) @> ARRAY[id]): its history, audit and explanation read those rows instead of its streams whole. Not on job streams, which are their job''s alone.';
CREATE INDEX appends_archive_job_ids ON appends_archive USING gin (jl_job_ids(data)) WHERE NOT starts_with(stream, 'job:');
COMMENT ON INDEX appends_archive_job_ids IS 'As appends_job_ids, for the archived rows.';

ALTER TABLE jl_limit_jobs ALTER COLUMN stream SET (n_distinct = -0.5);
ANALYZE jl_limit_jobs;
`,
};

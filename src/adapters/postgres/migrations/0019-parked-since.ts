import type { Migration } from './migration.js';

// Issue 23: every key's line counted in one pass. The page's listing of keys (list-keys.ts
// KEY_ROWS) counts the parked jobs of every key and takes the oldest wait of each; by
// jl_jobs_parked alone that needs the table's rows too (parked_at), and the planner read the
// whole of jl_jobs for it, finished jobs included: 45 ms of a 130 ms listing at 10,003 keys and
// 172,000 jobs (bench:reads). Carrying parked_at in the index (INCLUDE: no new entry, no change of
// its order) makes it an index-only scan of the parked jobs: 8 ms. parked_at is set when a job
// parks and cleared when it leaves the line, by the updates that change status (already non-HOT:
// status is in the index's predicate), so the write path gains no row version.
export const parkedSince: Migration = {
  version: 19,
  name: 'parked-since',
  sql: /* sql */ `
DROP INDEX jl_jobs_parked;
CREATE INDEX jl_jobs_parked ON jl_jobs (stream, priority, park_seq) INCLUDE (parked_at) WHERE status = 'parked';
COMMENT ON INDEX jl_jobs_parked IS
  'The line of one key (jl_parked by stream), in promotion order: the key view, the promotions; with parked_at, each key''s count and oldest wait for the listing of keys without reading the table.';
`,
};

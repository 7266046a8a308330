import type { Migration } from './migration.js';

// Indexes for listing jobs newest first (src/adapters/postgres/queries/list-jobs.ts: `jobledger
// jobs`, GET /api/jobs): the keyset (enqueued_at, job_id) descending, for all jobs and per key, so
// a page reads LIMIT rows instead of sorting every job ever enqueued.
export const jobListing: Migration = {
  version: 4,
  name: 'job_listing',
  sql: /* sql */ `
CREATE INDEX jl_jobs_recent ON jl_jobs (enqueued_at DESC, job_id DESC);
COMMENT ON INDEX jl_jobs_recent IS
  'Jobs newest first, the order and keyset cursor of the job listing (optionally filtered by status).';
CREATE INDEX jl_jobs_key_recent ON jl_jobs (key, enqueued_at DESC, job_id DESC);
COMMENT ON INDEX jl_jobs_key_recent IS
  'The jobs of one key newest first: the job listing filtered by key.';
`,
};

import type { Queryable } from '../../../projections/transaction.js';
import { MAX_DEAD_JOBS } from '../../../commands/dead-jobs.js';

// The dead jobs of a key, for `retry --key K --dead` and `discard --key K --dead`: the read model
// names them, the ledger checks each again before anything is written. Walks the key's jobs
// through jl_jobs_key_recent, newest first.
export const DEAD_JOBS_SQL = /* sql */ `SELECT job_id FROM jl_jobs WHERE key = $1 AND status = 'dead' ORDER BY enqueued_at DESC, job_id DESC LIMIT $2`;

/** At most MAX_DEAD_JOBS, newest first: one retry or discard takes that many (run it again for the rest). */
export const deadJobsOf = async (db: Queryable, key: string): Promise<string[]> => {
  const { rows } = await db.query<{ job_id: string }>(DEAD_JOBS_SQL, [key, MAX_DEAD_JOBS]);
  return rows.map((r) => r.job_id);
};

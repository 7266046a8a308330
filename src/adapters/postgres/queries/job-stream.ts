import type { Queryable } from '../../../projections/transaction.js';

// Reads jl_jobs by its primary key (jl_jobs_pkey).
export const JOB_STREAM_SQL = /* sql */ `SELECT stream FROM jl_jobs WHERE job_id = $1`;

/**
 * The stream a job is recorded in, from jl_jobs; null for a job the read model does not hold.
 * With async projections a job enqueued a moment ago may not be there yet.
 */
export const jobStreamOf = async (db: Queryable, jobId: string): Promise<string | null> => {
  const { rows } = await db.query<{ stream: string }>(JOB_STREAM_SQL, [jobId]);
  return rows[0]?.stream ?? null;
};

import type { Queryable } from '../../../projections/transaction.js';

// How many of a batch of jobs have finished, for a caller waiting on its jobs (the demo, tests):
// reads jl_jobs by its primary key (jl_jobs_pkey), one probe per job id.
export const FINISHED_JOBS_SQL = /* sql */ `SELECT count(*)::int AS n FROM jl_jobs WHERE job_id = ANY($1::text[]) AND status IN ('completed', 'dead', 'cancelled', 'discarded')`;

/** How many of these jobs have finished (completed, dead, cancelled or discarded). */
export const finishedJobs = async (db: Queryable, jobIds: readonly string[]): Promise<number> => {
  const { rows } = await db.query<{ n: number }>(FINISHED_JOBS_SQL, [jobIds]);
  return rows[0]?.n ?? 0;
};

// The statuses of the job listing, apart from the listing's query: the CLI's `jobs --status` (its
// help and its choices) names them without loading what the query needs (io-ts, pg;
// test/cli/start.e2e.test.ts keeps help light), and list-jobs.ts validates against them.

/** A job's status in jl_jobs (see its column comment in migration 0003). */
export const JOB_STATUSES = ['pending', 'scheduled', 'parked', 'holding', 'running', 'completed', 'dead', 'cancelled', 'discarded'] as const;

/**
 * What the listing filters on: a status, or `failed`: jobs whose last attempt failed (or whose
 * worker went silent) and that wait for their retry, holding no slot (scheduled, with an attempt
 * used). Dead jobs are `dead`.
 */
export const JOB_STATUS_FILTERS = [...JOB_STATUSES, 'failed'] as const;

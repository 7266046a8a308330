/** Which stream a job is recorded in (key:<key> or job:<jobId>); null for a job not known. */
export type JobStreamLookup = (jobId: string) => Promise<string | null>;

import type { DomainError } from '../errors.js';
import type { JobEntry } from '../key-state.js';
import { leaseHolder, type Decision } from './decision.js';

/** Complete and Fail speak of an attempt, so the lease must have been started. */
export const startedHolder = (
  d: Decision,
  jobId: string,
  leaseId: string,
): { readonly job: JobEntry; readonly error?: undefined } | { readonly job?: undefined; readonly error: DomainError } => {
  const held = leaseHolder(d, jobId, leaseId);
  if (held.job && held.job.lease?.workerId == null) return { error: { tag: 'NotStarted', jobId, leaseId } };
  return held;
};

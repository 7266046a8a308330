import type { CommandOf } from '../commands.js';
import { accept, leaseHolder, refuse, type Decision, type Outcome } from './decision.js';

/**
 * The worker's handler under a revoked lease has stopped: the slot passes on in this append, and
 * the job is cancelled (a cancel) or goes back to be retried (a release). Only a revoked lease
 * ends this way: a handler that ended on its own reports Complete, Fail or Yield.
 */
export const stopped = (c: CommandOf<'Stopped'>, d: Decision): Outcome => {
  const { job, error } = leaseHolder(d, c.jobId, c.leaseId);
  if (error) return refuse(error);
  if (job.lease?.revoked === undefined) return refuse({ tag: 'NotRevoked', jobId: c.jobId, leaseId: c.leaseId });
  d.endRevoked(job, c.jitter, false);
  d.fillSlots();
  return accept(d);
};

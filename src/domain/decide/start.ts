import type { CommandOf } from '../commands.js';
import { accept, leaseHolder, refuse, type Decision, type Outcome } from './decision.js';

/**
 * A worker begins running the job. This is where an attempt is counted (a refused or parked
 * admission costs none), and the lease restarts: it bounds the worker's silence from here on.
 * Only one Start per lease: a duplicate delivery of the same message runs nothing.
 */
export const start = (c: CommandOf<'Start'>, d: Decision): Outcome => {
  const { job, error } = leaseHolder(d, c.jobId, c.leaseId);
  if (error) return refuse(error);
  if (job.lease?.workerId != null) {
    return refuse({ tag: 'AlreadyStarted', jobId: c.jobId, leaseId: c.leaseId, workerId: job.lease.workerId });
  }
  d.start(job, c.workerId, c.msgId);
  return accept(d);
};

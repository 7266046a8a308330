import type { CommandOf } from '../commands.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';
import { startedHolder } from './started-holder.js';

/**
 * The attempt failed: the slot goes to the next parked job; the job is retried after a backoff
 * (holding no slot meanwhile) or is dead, or, if an operator cancelled it while it ran, is cancelled.
 */
export const fail = (c: CommandOf<'Fail'>, d: Decision): Outcome => {
  const { job, error } = startedHolder(d, c.jobId, c.leaseId);
  if (error) return refuse(error);
  const cancelledBy = job.lease?.revoked?.cancel === true ? job.lease.revoked.by : undefined;
  d.emit('JobFailed', {
    jobId: c.jobId,
    leaseId: c.leaseId,
    attempt: job.attempts,
    error: c.error,
    retryAt: cancelledBy === undefined ? d.retryAt(job, c.jitter) : null,
  });
  d.release(job, 'failed');
  if (cancelledBy === undefined) d.retryOrDead(job, c.jitter, 'failed');
  else d.emit('JobCancelled', { jobId: c.jobId, by: cancelledBy });
  d.fillSlots();
  d.handOff(c.handOffTo);
  return accept(d);
};

import type { CommandOf } from '../commands.js';
import { accept, leaseHolder, refuse, type Decision, type Outcome } from './decision.js';

/**
 * Graceful shutdown gives the slot back without burning the attempt. The job waits in line again
 * with its priority and enqueue order and is promoted like any other (solid_queue #735 returned
 * jobs to the queue without their slot, bypassing the limit).
 */
export const yieldSlot = (c: CommandOf<'Yield'>, d: Decision): Outcome => {
  const { job, error } = leaseHolder(d, c.jobId, c.leaseId);
  if (error) return refuse(error);
  // The attempt goes back only if this lease was started (a yield of an unstarted admission burned none).
  const attempts = job.lease?.workerId != null ? job.attempts - 1 : job.attempts;
  d.emit('JobYielded', { jobId: c.jobId, leaseId: c.leaseId, attempts });
  d.release(job, 'yielded');
  d.emit('JobParked', { jobId: c.jobId });
  d.fillSlots();
  return accept(d);
};

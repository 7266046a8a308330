import type { CommandOf } from '../commands.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/**
 * Cancels a scheduled, parked or running job. A job that holds a slot nobody started lets it go
 * at once, to the next parked job. A running one does NOT: its handler may still be running, so
 * the cancel revokes its lease (the worker aborts the handler as soon as the dispatcher tells it)
 * and the slot passes on when the worker says the handler stopped, or when the lease lapses
 * (invariant 8). Freeing it at once let a second handler start on a limit-1 key beside the first
 * (issue 21, item 1).
 */
export const cancel = (c: CommandOf<'Cancel'>, d: Decision): Outcome => {
  const job = d.job(c.jobId);
  if (job === undefined) return refuse({ tag: 'JobNotFound', jobId: c.jobId });
  if (job.home !== undefined) return refuse({ tag: 'HeldElsewhere', jobId: c.jobId, home: job.home });
  if (job.lease?.workerId != null) {
    // Asked again: the first cancel stands (a pending release becomes a cancel).
    if (job.lease.revoked?.cancel !== true) d.emit('LeaseRevoked', { jobId: c.jobId, leaseId: job.lease.leaseId, by: c.by, cancel: true });
    return accept(d);
  }
  d.emit('JobCancelled', { jobId: c.jobId, by: c.by });
  if (job.lease !== null) {
    d.release(job, 'cancelled');
    d.fillSlots();
  }
  return accept(d);
};

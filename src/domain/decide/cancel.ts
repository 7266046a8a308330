import type { CommandOf } from '../commands.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/** Cancels a scheduled, parked or running job; a holder's slot goes to the next parked job at once. */
export const cancel = (c: CommandOf<'Cancel'>, d: Decision): Outcome => {
  const job = d.job(c.jobId);
  if (job === undefined) return refuse({ tag: 'JobNotFound', jobId: c.jobId });
  if (job.home !== undefined) return refuse({ tag: 'HeldElsewhere', jobId: c.jobId, home: job.home });
  d.emit('JobCancelled', { jobId: c.jobId, by: c.by });
  if (job.lease !== null) {
    d.release(job, 'cancelled');
    d.fillSlots();
  }
  return accept(d);
};

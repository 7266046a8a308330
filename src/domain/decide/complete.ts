import type { CommandOf } from '../commands.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';
import { startedHolder } from './started-holder.js';

/**
 * JobCompleted, SlotReleased and the promotion of the next parked job in one append: a job parked
 * concurrently made this append conflict, so the release re-decides and sees it (solid_queue #456).
 * With handOffTo, the promoted job is started by that worker in the same append.
 */
export const complete = (c: CommandOf<'Complete'>, d: Decision): Outcome => {
  const { job, error } = startedHolder(d, c.jobId, c.leaseId);
  if (error) return refuse(error);
  d.emit('JobCompleted', { jobId: c.jobId, leaseId: c.leaseId });
  d.release(job, 'completed');
  d.fillSlots();
  d.handOff(c.handOffTo);
  return accept(d);
};

import type { CommandOf } from '../commands.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';
import { startedHolder } from './started-holder.js';

/** The attempt failed: the slot goes to the next parked job; the job is retried after a backoff (holding no slot meanwhile) or is dead. */
export const fail = (c: CommandOf<'Fail'>, d: Decision): Outcome => {
  const { job, error } = startedHolder(d, c.jobId, c.leaseId);
  if (error) return refuse(error);
  d.emit('JobFailed', {
    jobId: c.jobId,
    leaseId: c.leaseId,
    attempt: job.attempts,
    error: c.error,
    retryAt: d.retryAt(job, c.jitter),
  });
  d.release(job, 'failed');
  d.retryOrDead(job, c.jitter, 'failed');
  d.fillSlots();
  d.handOff(c.handOffTo);
  return accept(d);
};

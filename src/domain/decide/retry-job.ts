import type { CommandOf } from '../commands.js';
import type { DomainError } from '../errors.js';
import { isDead } from '../key-state.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/**
 * A dead job runs again: JobRetried brings it back with a fresh set of attempts, and it is admitted
 * like an arrival (a free slot here and on each of its further limits, in this one decision, or
 * the back of the line), so a retry can never put a key over its limit. Whether the job is dead is
 * the state's answer (KeyState.dead): a retry and a discard of one dead job exclude each other, and
 * a job retried (and perhaps completed since) is not retried again. Deciding it from the job's
 * events read before the append let both land: a discarded job ran (issue 21, item 5).
 */
export const retryJob = (c: CommandOf<'RetryJob'>, d: Decision): Outcome => {
  const refusal = notDead(c.jobId, d);
  if (refusal !== undefined) return refuse(refusal);
  const { limits: recorded, ...job } = c.job;
  // An arrival like an enqueue: under its queue's cap as the ledger holds it now (invariant 10).
  const cap = d.queueCap(job.queue);
  const limits = cap === undefined || recorded?.includes(cap) === true ? recorded : [...(recorded ?? []), cap];
  d.emit('JobRetried', { jobId: c.jobId, by: c.by, ...job, ...(limits !== undefined && limits.length > 0 ? { limits } : {}) });
  d.admit(c.jobId);
  return accept(d);
};

/** Drops a dead job from the failed list for good: it leaves the key's dead jobs, and can be neither retried nor discarded again. */
export const discardDead = (c: CommandOf<'DiscardDead'>, d: Decision): Outcome => {
  const refusal = notDead(c.jobId, d);
  if (refusal !== undefined) return refuse(refusal);
  d.emit('DeadDiscarded', { jobId: c.jobId, by: c.by });
  return accept(d);
};

/** The refusal for a job that is not among the key's dead: it waits or runs (here, or as a guest at its home), or it is no longer dead. */
const notDead = (jobId: string, d: Decision): DomainError | undefined => {
  if (isDead(d.state, jobId)) return undefined;
  const job = d.job(jobId);
  if (job?.home !== undefined) return { tag: 'HeldElsewhere', jobId, home: job.home };
  return { tag: 'NotDead', jobId, status: job === undefined ? 'not dead (retried, discarded or never dead)' : job.lease?.workerId != null ? 'running' : job.status };
};

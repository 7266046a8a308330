import type { CommandOf } from '../commands.js';
import type { DomainError } from '../errors.js';
import type { JobEntry } from '../key-state.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/**
 * A dead job runs again: JobRetried brings it back with a fresh set of attempts, and it is admitted
 * like an arrival (a free slot here and on each of its further limits, in this one decision, or
 * the back of the line), so a retry can never put a key over its limit. The state holds no dead
 * job: one it still holds is not dead, and is refused (two operators retrying at once: the second
 * finds the first's retry). That the job is dead is the command layer's check, from the ledger.
 */
export const retryJob = (c: CommandOf<'RetryJob'>, d: Decision): Outcome => {
  const refusal = notDead(d.job(c.jobId));
  if (refusal !== undefined) return refuse(refusal);
  const { limits: recorded, ...job } = c.job;
  // An arrival like an enqueue: under its queue's cap as the ledger holds it now (invariant 10).
  const cap = d.queueCap(job.queue);
  const limits = cap === undefined || recorded?.includes(cap) === true ? recorded : [...(recorded ?? []), cap];
  d.emit('JobRetried', { jobId: c.jobId, by: c.by, ...job, ...(limits !== undefined && limits.length > 0 ? { limits } : {}) });
  d.admit(c.jobId);
  return accept(d);
};

/** Drops a dead job from the failed list: nothing of the key's state changes (it holds no dead job). */
export const discardDead = (c: CommandOf<'DiscardDead'>, d: Decision): Outcome => {
  const refusal = notDead(d.job(c.jobId));
  if (refusal !== undefined) return refuse(refusal);
  d.emit('DeadDiscarded', { jobId: c.jobId, by: c.by });
  return accept(d);
};

/** The refusal for a job the state holds: it waits or runs, here or (a guest) at its home. */
const notDead = (job: JobEntry | undefined): DomainError | undefined => {
  if (job === undefined) return undefined;
  if (job.home !== undefined) return { tag: 'HeldElsewhere', jobId: job.jobId, home: job.home };
  return { tag: 'NotDead', jobId: job.jobId, status: job.lease?.workerId != null ? 'running' : job.status };
};

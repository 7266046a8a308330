import type { CommandOf } from '../commands.js';
import { accept, leaseHolder, refuse, type Decision, type Outcome } from './decision.js';

/**
 * The slot goes back without burning the attempt (solid_queue #735 returned jobs to the queue
 * without their slot, bypassing the limit). At graceful shutdown the job waits in line again with
 * its priority and enqueue order and is promoted like any other; given back with a delay (no
 * handler for it in that worker), it is scheduled, holding no slot, so the key's other jobs take
 * the slot meanwhile and the job is admitted again when due, as a retry is. A job an operator
 * cancelled while it ran is cancelled instead.
 *
 * Give-backs are counted: one given back for `deadAfterMs` since its first (no worker knows its
 * name) is dead, retryable once a worker knows it. Without that bound it cycled for ever, five
 * events and a message every few seconds, never on the failed list (issue 21, item 6).
 */
export const yieldSlot = (c: CommandOf<'Yield'>, d: Decision): Outcome => {
  const { job, error } = leaseHolder(d, c.jobId, c.leaseId);
  if (error) return refuse(error);
  // The attempt goes back only if this lease was started (a yield of an unstarted admission burned none).
  const attempts = job.lease?.workerId != null ? job.attempts - 1 : job.attempts;
  const retryAt = c.delayMs === undefined ? undefined : d.now + c.delayMs;
  const revoked = job.lease?.revoked;
  const before = job.givenBack;
  const cancelled = revoked?.cancel === true;
  // Given back for deadAfterMs since the first time: not offered again (no retryAt), dead.
  const dies = !cancelled && retryAt !== undefined && c.deadAfterMs !== undefined && before !== undefined && d.now - before.since >= c.deadAfterMs;
  d.emit('JobYielded', {
    jobId: c.jobId,
    leaseId: c.leaseId,
    attempts,
    ...(c.reason === undefined ? {} : { reason: c.reason }),
    // A retryAt says "offered again then": not so for a job that dies or is cancelled here (the
    // model checker read a cancelled job's give-back as one offered past its bound, seed 10040).
    ...(retryAt === undefined || dies || cancelled ? {} : { retryAt }),
  });
  d.release(job, 'yielded');
  if (cancelled) d.emit('JobCancelled', { jobId: c.jobId, by: revoked.by });
  else if (dies) {
    const count = before!.count + 1;
    d.emit('JobDead', { jobId: c.jobId, reason: `no worker knows ${c.name ?? 'its name'}: given back ${count} times over ${Math.round((d.now - before!.since) / 1000)} s` });
  } else if (retryAt === undefined) d.emit('JobParked', { jobId: c.jobId });
  else d.emit('JobScheduled', { jobId: c.jobId, runAt: retryAt });
  d.fillSlots();
  return accept(d);
};

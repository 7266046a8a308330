import type { CommandOf } from '../commands.js';
import { holders, type JobState } from '../key-state.js';
import { keyStream } from '../streams.js';
import { accept, type Decision, type Outcome } from './decision.js';

/**
 * Reclaims every started holder whose lease ran out by now, in one append, and promotes as many
 * parked jobs as slots were freed (solid_queue #502 freed one slot per key per sweep). An admission
 * no worker has started holds its slot without expiry: only silence under a started lease costs it.
 * A revoked lease whose worker never said its handler stopped ends here too, as its revocation
 * asked (cancelled, or retried). After an outage (`graceFrom`) every lease gets one more whole
 * lease to be renewed: the sweeper and a worker's queued Complete raced when the database came
 * back, and a job that had completed ran again (issue 21, item 7). So does a lease after the
 * quarantine of its stream or of any of its job's limit keys (`streamGrace`): its worker's result
 * could not be recorded while one of them could not be read (the model checker, seeds 100045 and
 * 100210: a completed job ran again, its lease expired just after the quarantine it waited out).
 */
export const expireLeases = (c: CommandOf<'ExpireLeases'>, d: Decision): Outcome => {
  for (const job of holders(d.state)) {
    const lease = job.lease;
    if (lease?.workerId == null || lease.expiresAt === null || lease.expiresAt > d.now) continue;
    // A worker that could not renew is given one whole lease from when it could again: its renewal, or its result, lands first.
    const from = graceFrom(c, d.stream, job);
    if (from !== undefined && from + job.leaseMs > d.now) continue;
    d.emit('LeaseExpired', { jobId: job.jobId, leaseId: lease.leaseId, expiresAt: lease.expiresAt });
    if (lease.revoked !== undefined) {
      d.endRevoked(job, c.jitter, true);
      continue;
    }
    d.release(job, 'expired');
    d.afterReclaim(job, c.jitter, 'lease expired');
  }
  d.fillSlots();
  return accept(d);
};

/** The latest time from which the job's worker could renew and record its result again, if any: the outage's end, or its streams' quarantines'. */
const graceFrom = (c: CommandOf<'ExpireLeases'>, stream: string, job: JobState): number | undefined => {
  const times = [c.graceFrom, c.streamGrace?.[stream], ...(job.limits ?? []).map((key) => c.streamGrace?.[keyStream(key)])].filter((t): t is number => t !== undefined);
  return times.length === 0 ? undefined : Math.max(...times);
};

import type { CommandOf } from '../commands.js';
import { holders } from '../key-state.js';
import { accept, type Decision, type Outcome } from './decision.js';

/**
 * Reclaims every started holder whose lease ran out by now, in one append, and promotes as many
 * parked jobs as slots were freed (solid_queue #502 freed one slot per key per sweep). An admission
 * no worker has started holds its slot without expiry: only silence under a started lease costs it.
 * A revoked lease whose worker never said its handler stopped ends here too, as its revocation
 * asked (cancelled, or retried). After an outage (`graceFrom`) every lease gets one more whole
 * lease to be renewed: the sweeper and a worker's queued Complete raced when the database came
 * back, and a job that had completed ran again (issue 21, item 7).
 */
export const expireLeases = (c: CommandOf<'ExpireLeases'>, d: Decision): Outcome => {
  for (const job of holders(d.state)) {
    const lease = job.lease;
    if (lease?.workerId == null || lease.expiresAt === null || lease.expiresAt > d.now) continue;
    // A worker that could not renew is given one whole lease from when it could again: its renewal, or its result, lands first.
    if (c.graceFrom !== undefined && c.graceFrom + job.leaseMs > d.now) continue;
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

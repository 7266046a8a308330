import type { CommandOf } from '../commands.js';
import { holders } from '../key-state.js';
import { accept, type Decision, type Outcome } from './decision.js';

/**
 * Reclaims every holder whose lease ran out by now, in one append, and promotes as many parked
 * jobs as slots were freed (solid_queue #502 freed one slot per key per sweep).
 */
export const expireLeases = (c: CommandOf<'ExpireLeases'>, d: Decision): Outcome => {
  for (const job of holders(d.state)) {
    if (job.lease === null || job.lease.expiresAt > d.now) continue;
    d.emit('LeaseExpired', { jobId: job.jobId, leaseId: job.lease.leaseId, expiresAt: job.lease.expiresAt });
    d.release(job, 'expired');
    d.afterReclaim(job, c.jitter, 'lease expired');
  }
  d.fillSlots();
  return accept(d);
};

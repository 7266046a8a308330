import type { CommandOf } from '../commands.js';
import { accept, leaseHolder, refuse, type Decision, type Outcome } from './decision.js';

/**
 * Heartbeat: the lease bounds silence, not run time (solid_queue #689 freed live holders).
 * A lease past its expiry but not yet reclaimed is still the holder's: only a LeaseExpired event
 * takes a slot away, and a renewal racing the sweeper conflicts with it on the stream revision.
 * A revoked lease is not renewed: the refusal tells the worker to stop the handler (if the
 * dispatcher's notice did not), and the lease runs out if it never says it has.
 */
export const renew = (c: CommandOf<'Renew'>, d: Decision): Outcome => {
  const { job, error } = leaseHolder(d, c.jobId, c.leaseId);
  if (error) return refuse(error);
  const revoked = job.lease?.revoked;
  if (revoked !== undefined) return refuse({ tag: 'LeaseRevoked', jobId: c.jobId, leaseId: c.leaseId, by: revoked.by });
  const msgId = job.lease?.msgId ?? null;
  d.emit('LeaseRenewed', { jobId: c.jobId, leaseId: c.leaseId, expiresAt: d.now + job.leaseMs, ...(msgId === null ? {} : { msgId }) });
  return accept(d);
};

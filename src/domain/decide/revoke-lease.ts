import type { CommandOf } from '../commands.js';
import { holders } from '../key-state.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/** An operator force-releases one holder or all of them; their later Start/Renew/Complete are fenced off. */
export const revokeLease = (c: CommandOf<'RevokeLease'>, d: Decision): Outcome => {
  const guest = c.jobId === undefined ? undefined : d.job(c.jobId)?.home;
  if (guest !== undefined) return refuse({ tag: 'HeldElsewhere', jobId: c.jobId!, home: guest });
  // A job of another stream holding a slot here as one of its limits is revoked at its home.
  const targets = holders(d.state).filter((j) => j.home === undefined && (c.jobId === undefined || j.jobId === c.jobId));
  if (c.jobId !== undefined && targets.length === 0) return refuse({ tag: 'NotHolding', jobId: c.jobId });
  for (const job of targets) {
    if (job.lease === null) continue;
    d.emit('LeaseRevoked', { jobId: job.jobId, leaseId: job.lease.leaseId, by: c.by });
    d.release(job, 'revoked');
    d.afterReclaim(job, c.jitter, `lease revoked by ${c.by}`);
  }
  d.fillSlots();
  return accept(d);
};

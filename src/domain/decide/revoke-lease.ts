import type { CommandOf } from '../commands.js';
import { holders } from '../key-state.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/**
 * An operator force-releases one holder or all of them; their later Start/Renew are fenced off.
 * A holder nobody started lets its slot go at once and waits in line again. A started one's
 * handler may be running: its lease is revoked (the worker aborts the handler) and the slot
 * passes on when the worker says the handler stopped, or when the lease lapses (invariant 8),
 * unless the operator forces it (`force`: no handler runs, its worker is gone), recorded so.
 */
export const revokeLease = (c: CommandOf<'RevokeLease'>, d: Decision): Outcome => {
  const guest = c.jobId === undefined ? undefined : d.job(c.jobId)?.home;
  if (guest !== undefined) return refuse({ tag: 'HeldElsewhere', jobId: c.jobId!, home: guest });
  // A job of another stream holding a slot here as one of its limits is revoked at its home.
  const targets = holders(d.state).filter((j) => j.home === undefined && (c.jobId === undefined || j.jobId === c.jobId));
  if (c.jobId !== undefined && targets.length === 0) return refuse({ tag: 'NotHolding', jobId: c.jobId });
  for (const { jobId, lease } of targets) {
    const running = lease!.workerId != null;
    const now = !running || c.force === true;
    // Revoked already, and waiting for its handler: only a forced release adds anything.
    if (lease!.revoked !== undefined && !now) continue;
    d.emit('LeaseRevoked', { jobId, leaseId: lease!.leaseId, by: c.by, ...(running && c.force === true ? { force: true as const } : {}) });
    if (now) d.endRevoked(d.job(jobId)!, c.jitter, false);
  }
  d.fillSlots();
  return accept(d);
};

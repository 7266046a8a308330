import type { CommandOf } from '../commands.js';
import { parkedInOrder } from '../key-state.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/** The operator's way to drop parked jobs; parked jobs never expire on their own (pgbus deleted them silently). */
export const discardParked = (c: CommandOf<'DiscardParked'>, d: Decision): Outcome => {
  const guest = c.jobIds?.map((id) => d.job(id)).find((j) => j?.home !== undefined);
  if (guest !== undefined) return refuse({ tag: 'HeldElsewhere', jobId: guest.jobId, home: guest.home! });
  // A job of another stream waiting here as one of its limits is discarded at its home.
  const parked = parkedInOrder(d.state).filter((j) => j.home === undefined);
  if (c.jobIds !== undefined) {
    const parkedIds = new Set(parked.map((j) => j.jobId));
    const notParked = c.jobIds.filter((id) => !parkedIds.has(id));
    if (notParked.length > 0) return refuse({ tag: 'NotParked', jobIds: notParked });
  }
  const wanted = c.jobIds === undefined ? undefined : new Set(c.jobIds);
  for (const job of parked) {
    if (wanted === undefined || wanted.has(job.jobId)) d.emit('ParkedDiscarded', { jobId: job.jobId, by: c.by });
  }
  return accept(d);
};

import type { CommandOf } from '../commands.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/**
 * BullMQ Pro's pauseGroup: while a key is paused nothing new is admitted on it (an admission
 * parks, a release promotes no one), holders finish, and parked jobs keep their order. Pausing a
 * paused key is refused, so the ledger keeps the first who and why.
 */
export const pauseKey = (c: CommandOf<'PauseKey'>, d: Decision): Outcome => {
  if (d.state.paused !== undefined) return refuse({ tag: 'AlreadyPaused', by: d.state.paused.by, reason: d.state.paused.reason });
  d.emit('KeyPaused', { by: c.by, reason: c.reason ?? null });
  return accept(d);
};

/** The key runs again: its free slots go to the parked jobs, in promotion order, in the same append. */
export const resumeKey = (c: CommandOf<'ResumeKey'>, d: Decision): Outcome => {
  if (d.state.paused === undefined) return refuse({ tag: 'NotPaused' });
  d.emit('KeyResumed', { by: c.by, reason: c.reason ?? null });
  d.fillSlots();
  return accept(d);
};

import { DEFAULT_LEASE_MS, type CommandOf } from '../commands.js';
import { accept, type Decision, type Outcome } from './decision.js';

/**
 * A raised limit promotes parked jobs in the same append (pgbus gated admission on the stored
 * limit). A lowered one preempts no one: holders above it finish, and no one is admitted until
 * they drop below it.
 */
export const setLimit = (c: CommandOf<'SetLimit'>, d: Decision): Outcome => {
  const configured = d.state.limit > 0;
  const leaseMs = c.leaseMs ?? (configured ? d.state.leaseMs : DEFAULT_LEASE_MS);
  if (configured && c.limit === d.state.limit && leaseMs === d.state.leaseMs) return accept(d);
  d.emit('KeyLimitSet', { limit: c.limit, leaseMs, by: c.by });
  d.fillSlots();
  return accept(d);
};

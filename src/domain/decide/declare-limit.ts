import { DEFAULT_LEASE_MS, type CommandOf } from '../commands.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/**
 * A limit named by a process's configuration (a queue's cap) is the ledger's once recorded: the
 * first process to declare it records it; a process declaring the same changes nothing; one
 * declaring another is refused, as an enqueue naming another limit is. Each `open` writing its
 * own cap made the cap the last opener's (recorded 1, then 5, then 1 again: issue 21, item 2).
 */
export const declareLimit = (c: CommandOf<'DeclareLimit'>, d: Decision): Outcome => {
  const recorded = d.state.limit;
  if (recorded === c.limit) return accept(d);
  if (recorded > 0) return refuse({ tag: 'LimitMismatch', recorded, requested: c.limit });
  d.emit('KeyLimitSet', { limit: c.limit, leaseMs: DEFAULT_LEASE_MS, by: c.by });
  d.fillSlots();
  return accept(d);
};

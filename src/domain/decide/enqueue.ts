import { DEFAULT_LEASE_MS, DEFAULT_LIMIT, type CommandOf, type KeyPolicy } from '../commands.js';
import { accept, refuse, type Decision, type Outcome } from './decision.js';

/**
 * Enqueue and EnqueueMany: one append for the whole batch, each job admitted against the limit in
 * turn exactly as a single enqueue would be (pgbus #413 shipped a bulk path that skipped the limit).
 * A job already on the key records nothing new, so a retried enqueue is harmless.
 */
export const enqueue = (c: CommandOf<'Enqueue'> | CommandOf<'EnqueueMany'>, d: Decision): Outcome => {
  // A job's own stream needs no KeyLimitSet: its first JobEnqueued says it is solo (limit 1).
  const solo = c.solo === true && d.state.limit === 0;
  if (!solo) {
    // A key's limit is stable: velocious keeps the first cap registered and rejects another.
    if (d.state.limit > 0 && c.limit !== undefined && c.limit !== d.state.limit && c.ownsLimit !== true) {
      return refuse({ tag: 'LimitMismatch', recorded: d.state.limit, requested: c.limit });
    }
    applyPolicy(c, d);
  }
  for (const job of c.type === 'Enqueue' ? [c.job] : c.jobs) {
    if (d.job(job.jobId) !== undefined) continue;
    const leaseMs = job.leaseMs ?? (solo && d.state.limit === 0 ? (c.leaseMs ?? DEFAULT_LEASE_MS) : d.state.leaseMs);
    // `+ 0` turns a priority of -0 into 0, the value JSON stores, so replay folds the same state.
    d.emit('JobEnqueued', { ...job, priority: job.priority + 0, leaseMs, ...(solo && d.state.limit === 0 ? { solo: true as const } : {}) });
    // A job due later holds no slot while it waits (pgbus took the slot at enqueue).
    if (job.runAt !== null && job.runAt > d.now) d.emit('JobScheduled', { jobId: job.jobId, runAt: job.runAt });
    else d.admit(job.jobId);
  }
  return accept(d);
};

/**
 * The first enqueue of a key sets its limit; a later one changes it only when it owns the limit
 * (and a raise promotes at once). A later one with another lease changes the key's lease.
 */
const applyPolicy = (policy: KeyPolicy, d: Decision): void => {
  const configured = d.state.limit > 0;
  const limit = policy.limit ?? (configured ? d.state.limit : DEFAULT_LIMIT);
  const leaseMs = policy.leaseMs ?? (configured ? d.state.leaseMs : DEFAULT_LEASE_MS);
  if (configured && limit === d.state.limit && leaseMs === d.state.leaseMs) return;
  d.emit('KeyLimitSet', { limit, leaseMs, by: null });
  d.fillSlots();
};

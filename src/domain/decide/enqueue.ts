import { DEFAULT_LEASE_MS, DEFAULT_LIMIT, type CommandOf, type JobSpec, type KeyPolicy } from '../commands.js';
import type { DomainError } from '../errors.js';
import { parkedInOrder } from '../key-state.js';
import { keyStream } from '../streams.js';
import { StreamsNeeded, accept, refuse, type Decision, type Outcome } from './decision.js';

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
  // Jobs this decision rejected or replaced: finished, yet seen (an id twice in a batch is enqueued once).
  const finished = new Set<string>();
  for (const named of c.type === 'Enqueue' ? [c.job] : c.jobs) {
    if (d.job(named.jobId) !== undefined || finished.has(named.jobId)) continue;
    // Its own key among its limits adds nothing (and would make it a guest of its own key).
    const job = underQueueCap(named.limits?.some((l) => keyStream(l.key) === d.stream) === true ? { ...named, limits: named.limits.filter((l) => keyStream(l.key) !== d.stream) } : named, d);
    const refusal = job.limits === undefined ? undefined : limitPolicies(job, c.ownsLimit === true, d);
    if (refusal !== undefined) return refuse(refusal);
    const leaseMs = job.leaseMs ?? (solo && d.state.limit === 0 ? (c.leaseMs ?? DEFAULT_LEASE_MS) : d.state.leaseMs);
    const { limits, ...spec } = job;
    // `+ 0` turns a priority of -0 into 0, the value JSON stores, so replay folds the same state.
    d.emit('JobEnqueued', {
      ...spec,
      priority: job.priority + 0,
      leaseMs,
      ...(solo && d.state.limit === 0 ? { solo: true as const } : {}),
      ...(limits !== undefined && limits.length > 0 ? { limits: limits.map((l) => l.key) } : {}),
    });
    // A job due later holds no slot while it waits (pgbus took the slot at enqueue).
    if (job.runAt !== null && job.runAt > d.now) d.emit('JobScheduled', { jobId: job.jobId, runAt: job.runAt });
    else if (d.hasRoomFor(job.jobId)) d.admit(job.jobId);
    else whenFull(job, d, finished);
  }
  return accept(d);
};

/** A job of a queue with a cap is under the cap's limit key too (Decision.queueCap: the ledger's cap, not the enqueuer's configuration). */
const underQueueCap = (job: JobSpec, d: Decision): JobSpec => {
  const cap = d.queueCap(job.queue);
  return cap === undefined || job.limits?.some((l) => l.key === cap) === true ? job : { ...job, limits: [...(job.limits ?? []), { key: cap }] };
};

/**
 * A further limit key's first use sets its limit (1 when the job names none), as a key's first
 * enqueue does; a later one naming another limit is refused, naming that key, unless it owns it.
 */
const limitPolicies = (job: JobSpec, ownsLimit: boolean, d: Decision): DomainError | undefined => {
  for (const { key, limit } of job.limits ?? []) {
    const other = d.on(keyStream(key));
    if (other === undefined) throw new StreamsNeeded(job.limits!.map((l) => keyStream(l.key)));
    const recorded = other.state.limit;
    if (recorded > 0 && limit !== undefined && limit !== recorded && !ownsLimit) return { tag: 'LimitMismatch', recorded, requested: limit, key };
    if (recorded === 0 || (limit !== undefined && limit !== recorded)) {
      other.emit('KeyLimitSet', { limit: limit ?? DEFAULT_LIMIT, leaseMs: recorded === 0 ? DEFAULT_LEASE_MS : other.state.leaseMs, by: null });
      other.fillSlots();
    }
  }
  return undefined;
};

/**
 * The first enqueue of a key sets its limit and its lease (the job's own lease, when it names one);
 * a later one changes them only when it owns the limit (and a raise promotes at once). A later
 * one naming another lease gives it to its job alone: the key's stays what it was (issue 21,
 * item 8: the README said the first enqueue's lease was the key's, and the ledger recorded 30 s).
 */
const applyPolicy = (policy: KeyPolicy, d: Decision): void => {
  const configured = d.state.limit > 0;
  const limit = policy.limit ?? (configured ? d.state.limit : DEFAULT_LIMIT);
  const leaseMs = configured && policy.ownsLimit !== true ? d.state.leaseMs : (policy.leaseMs ?? (configured ? d.state.leaseMs : DEFAULT_LEASE_MS));
  if (configured && limit === d.state.limit && leaseMs === d.state.leaseMs) return;
  d.emit('KeyLimitSet', { limit, leaseMs, by: null });
  d.fillSlots();
};

/**
 * A job that finds its key full (or paused) at enqueue: parks (the default), is rejected (recorded,
 * never runs), or parks in place of the parked jobs of its name (a trailing debounce: the newest
 * wins). The policy acts at enqueue only: a due retry or scheduled job parks as any other.
 */
const whenFull = (job: JobSpec, d: Decision, finished: Set<string>): void => {
  if (job.whenFull === 'reject') {
    d.emit('JobRejected', { jobId: job.jobId, reason: d.whyNoRoom(job.jobId) });
    finished.add(job.jobId);
    return;
  }
  if (job.whenFull === 'replace') {
    for (const parked of parkedInOrder(d.state)) {
      if (parked.debounce !== job.name) continue;
      d.emit('ParkedReplaced', { jobId: parked.jobId, by: job.jobId });
      finished.add(parked.jobId);
    }
  }
  d.emit('JobParked', { jobId: job.jobId });
};

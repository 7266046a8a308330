import type { KeyEvent, ReleaseReason } from './events.js';

// The audit of a key: one row per slot handoff (a lease, from admission to release), folded from
// the key stream's events alone. The decider records a tenure as
//   SlotAcquired | JobPromoted            the slot is taken (a promotion says how long it waited)
//   JobStarted                            a worker began the attempt under this lease
//   [JobCompleted | JobFailed | LeaseExpired | LeaseRevoked | JobYielded | JobCancelled]
//   SlotReleased {reason}                 the slot is free again
// within the stream's order, the releasing event and SlotReleased in the same append.

export interface Handoff {
  /** The concurrency key; a job without one has its own stream, named here (`job:<jobId>`). */
  readonly key: string;
  readonly jobId: string;
  readonly leaseId: string;
  /** The attempt started under this lease; null if no worker started it. */
  readonly attempt: number | null;
  readonly how: 'acquired' | 'promoted';
  /** How long it waited parked before this promotion; null when acquired at once. */
  readonly parkedMs: number | null;
  readonly acquiredAt: number;
  readonly workerId: string | null;
  readonly startedAt: number | null;
  /** Null while the slot is held. */
  readonly releasedAt: number | null;
  readonly reason: ReleaseReason | null;
  /** Who revoked the lease or cancelled the job. */
  readonly by: string | null;
  /** The error of a failed attempt, or why a worker gave the job back (and when it is offered again). */
  readonly error: string | null;
  /** Stream revision of the admission. */
  readonly acquiredRevision: number;
  /** Stream revision of the SlotReleased; null while held. The slot is held at revisions in [acquiredRevision, releasedRevision). */
  readonly releasedRevision: number | null;
}

/** A key stream's event with its revision, as the store recorded it. */
export interface RevisionedEvent {
  readonly revision: number;
  readonly event: KeyEvent;
}

type Draft = { -readonly [K in keyof Handoff]: Handoff[K] };

/** The handoffs of a stream's events (in revision order), oldest admission first. */
export const handoffsOf = (key: string, events: Iterable<RevisionedEvent>): Handoff[] => {
  const handoffs: Draft[] = [];
  // A job holds at most one slot at a time, so its open handoff is found by job id.
  const open = new Map<string, Draft>();
  for (const { revision, event } of events) {
    const e = event;
    if (e.type === 'SlotAcquired' || e.type === 'JobPromoted') {
      const promoted = e.type === 'JobPromoted';
      const h: Draft = {
        key,
        jobId: e.data.jobId,
        leaseId: e.data.leaseId,
        attempt: null,
        how: promoted ? 'promoted' : 'acquired',
        parkedMs: promoted ? e.data.waitedMs : null,
        acquiredAt: e.data.at,
        workerId: null,
        startedAt: null,
        releasedAt: null,
        reason: null,
        by: null,
        error: null,
        acquiredRevision: revision,
        releasedRevision: null,
      };
      handoffs.push(h);
      open.set(h.jobId, h);
      continue;
    }
    if (!('jobId' in e.data)) continue;
    const h = open.get(e.data.jobId);
    if (h === undefined) continue;
    switch (e.type) {
      case 'JobStarted':
        h.workerId = e.data.workerId;
        h.startedAt = e.data.at;
        h.attempt = e.data.attempt;
        break;
      case 'LeaseRevoked':
      case 'JobCancelled':
        h.by = e.data.by;
        break;
      case 'JobFailed':
        h.error = e.data.error;
        break;
      case 'JobYielded':
        if (e.data.reason !== undefined) {
          h.error = e.data.retryAt === undefined ? e.data.reason : `${e.data.reason}; offered again at ${new Date(e.data.retryAt).toISOString()}`;
        }
        break;
      case 'SlotReleased':
        h.releasedAt = e.data.at;
        h.reason = e.data.reason;
        h.releasedRevision = revision;
        open.delete(h.jobId);
        break;
    }
  }
  return handoffs;
};

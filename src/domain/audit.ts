import type { KeyEvent, ReleaseReason } from './events.js';
import { JOB_STREAM_PREFIX, KEY_STREAM_PREFIX } from './streams.js';

// The audit of a key: one row per slot handoff (a lease, from admission to release), folded from
// the key stream's events alone. The decider records a tenure of the key's own job as
//   SlotAcquired | JobPromoted            the slot is taken (a promotion says how long it waited)
//   JobStarted                            a worker began the attempt under this lease
//   [LeaseRevoked]                        an operator released or cancelled it while it ran: its
//                                         handler is told to stop; the slot stays held until it has
//   [JobCompleted | JobFailed | LeaseExpired | LeaseRevoked | JobYielded | JobCancelled]
//   SlotReleased {reason}                 the slot is free again
// within the stream's order, the releasing event and SlotReleased in the same append. A job of
// another key under this key's limit (JobEnqueued.limits: a guest) holds a slot here as
//   [LimitWaiting]                        it waited in this key's line (parked at its home)
//   LimitHeld                             the slot is taken, under the lease of its home
//   LimitReleased {reason}                its home released that lease
// Its start, worker and the who or what of its release are recorded at its home only.

export interface Handoff {
  /** The concurrency key; a job without one has its own stream, named here (`job:<jobId>`). */
  readonly key: string;
  readonly jobId: string;
  readonly leaseId: string;
  /**
   * A guest's home: the key of the job that held this slot as one of its further limits (named
   * as `key` is). Absent for the key's own jobs.
   */
  readonly home?: string;
  /**
   * Every further limit key the job was under, each held with this lease too (JobEnqueued.limits,
   * or LimitHeld.limits for a guest: this key among them). Absent for a job under its key alone.
   */
  readonly limits?: readonly string[];
  /** The attempt started under this lease; null if no worker started it (always, for a guest: see its home). */
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
  /** Stream revision of the admission (or LimitHeld). */
  readonly acquiredRevision: number;
  /** Stream revision of the SlotReleased (or LimitReleased); null while held. The slot is held at revisions in [acquiredRevision, releasedRevision). */
  readonly releasedRevision: number | null;
}

/** A key stream's event with its revision, as the store recorded it. */
export interface RevisionedEvent {
  readonly revision: number;
  readonly event: KeyEvent;
}

/** The name the audit gives a stream: its key, or the stream's own name for a job without one. */
export const auditKeyOf = (stream: string): string => (stream.startsWith(KEY_STREAM_PREFIX) ? stream.slice(KEY_STREAM_PREFIX.length) : stream);

/**
 * A job as a key's audit or state names it: a guest with its home ("job j1 of key a"), so it does
 * not read as one of the key's own. `home`: as auditKeyOf names it; absent for the key's own job.
 */
export const jobName = (jobId: string, home: string | null | undefined): string =>
  home == null ? jobId : home.startsWith(JOB_STREAM_PREFIX) ? `job ${jobId} (no key)` : `job ${jobId} of key ${home}`;

type Draft = { -readonly [K in keyof Handoff]: Handoff[K] };

const opened = (key: string, jobId: string, leaseId: string, at: number, revision: number, parkedMs: number | null): Draft => ({
  key,
  jobId,
  leaseId,
  attempt: null,
  how: parkedMs === null ? 'acquired' : 'promoted',
  parkedMs,
  acquiredAt: at,
  workerId: null,
  startedAt: null,
  releasedAt: null,
  reason: null,
  by: null,
  error: null,
  acquiredRevision: revision,
  releasedRevision: null,
});

/** The handoffs of a stream's events (in revision order), oldest admission first. */
export const handoffsOf = (key: string, events: Iterable<RevisionedEvent>): Handoff[] => {
  const handoffs: Draft[] = [];
  // A job holds at most one slot of a key at a time, so its open handoff is found by job id.
  const open = new Map<string, Draft>();
  // The further limits of the key's own jobs that have any (kept from their JobEnqueued).
  const limitsOf = new Map<string, readonly string[]>();
  // Guests waiting in the key's line: their LimitHeld is a promotion.
  const waiting = new Set<string>();
  const close = (h: Draft, reason: ReleaseReason, at: number, revision: number) => {
    h.releasedAt = at;
    h.reason = reason;
    h.releasedRevision = revision;
    open.delete(h.jobId);
  };
  for (const { revision, event } of events) {
    const e = event;
    switch (e.type) {
      case 'JobEnqueued':
      case 'JobRetried':
        // A finished job's id enqueued again is a new job, with limits of its own or none (a retried one: those it had).
        if (e.data.limits !== undefined && e.data.limits.length > 0) limitsOf.set(e.data.jobId, e.data.limits);
        else limitsOf.delete(e.data.jobId);
        continue;
      case 'SlotAcquired':
      case 'JobPromoted': {
        const h = opened(key, e.data.jobId, e.data.leaseId, e.data.at, revision, e.type === 'JobPromoted' ? e.data.waitedMs : null);
        const limits = limitsOf.get(h.jobId);
        if (limits !== undefined) h.limits = limits;
        handoffs.push(h);
        open.set(h.jobId, h);
        continue;
      }
      case 'LimitWaiting':
        waiting.add(e.data.jobId);
        continue;
      case 'LimitLeft':
        waiting.delete(e.data.jobId);
        continue;
      case 'LimitHeld': {
        // The wait is the home's (JobPromoted.waitedMs): the job waited in every line it is in at once.
        const h = opened(key, e.data.jobId, e.data.leaseId, e.data.at, revision, waiting.delete(e.data.jobId) ? e.data.waitedMs : null);
        h.home = auditKeyOf(e.data.home);
        h.limits = e.data.limits;
        handoffs.push(h);
        open.set(h.jobId, h);
        continue;
      }
      default:
        break;
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
          h.error = e.data.retryAt === undefined ? e.data.reason : `${e.data.reason}; offered again at ${iso(e.data.retryAt)}`;
        }
        break;
      case 'SlotReleased':
      case 'LimitReleased':
        close(h, e.data.reason, e.data.at, revision);
        break;
    }
  }
  return handoffs;
};

const iso = (at: number): string => new Date(at).toISOString();

/** A run of renewals of one lease, in one line. */
export const renewalsInWords = (leaseId: string, count: number, firstAt: number, lastAt: number, expiresAt: number): string =>
  `lease ${leaseId} renewed ${count} times, from ${iso(firstAt)} to ${iso(lastAt)}, last until ${iso(expiresAt)}`;

const waited = (ms: number): string => (ms < 1_000 ? `${ms} ms` : `${Math.round(ms / 100) / 10} s`);

/**
 * Each event of a stream (in revision order) in words, for an operator reading the audit. A guest
 * is named with its home ("job j1 of key a"): LimitReleased does not repeat it, so it is kept
 * from the job's LimitWaiting or LimitHeld.
 */
export const describeEvents = (events: Iterable<KeyEvent>): string[] => {
  const homes = new Map<string, string>();
  const guest = (jobId: string): string => {
    const home = homes.get(jobId);
    return home === undefined ? `job ${jobId}` : jobName(jobId, auditKeyOf(home));
  };
  const out: string[] = [];
  for (const e of events) out.push(inWords(e, guest, homes));
  return out;
};

const underLimits = (limits: readonly string[] | undefined): string =>
  limits === undefined || limits.length === 0 ? '' : `, under limits ${limits.join(', ')}`;

const inWords = (e: KeyEvent, guest: (jobId: string) => string, homes: Map<string, string>): string => {
  switch (e.type) {
    case 'KeyLimitSet':
      return `limit set to ${e.data.limit}, lease ${waited(e.data.leaseMs)}${e.data.by === null ? '' : ` by ${e.data.by}`}`;
    case 'JobEnqueued':
      return `job ${e.data.jobId} (${e.data.name}) enqueued on queue ${e.data.queue}, priority ${e.data.priority}${e.data.runAt === null ? '' : `, due at ${iso(e.data.runAt)}`}${underLimits(e.data.limits)}`;
    case 'SlotAcquired':
      return `job ${e.data.jobId} took a free slot (lease ${e.data.leaseId})`;
    case 'JobParked':
      return `job ${e.data.jobId} parked: no free slot for it`;
    case 'JobPromoted':
      return `job ${e.data.jobId} promoted to a slot after ${waited(e.data.waitedMs)} parked (lease ${e.data.leaseId})`;
    case 'JobScheduled':
      return `job ${e.data.jobId} scheduled for ${iso(e.data.runAt)}`;
    case 'JobStarted':
      return `worker ${e.data.workerId} started job ${e.data.jobId}, attempt ${e.data.attempt} (lease ${e.data.leaseId}, expires ${iso(e.data.expiresAt)})`;
    case 'LeaseRenewed':
      return `lease ${e.data.leaseId} of job ${e.data.jobId} renewed until ${iso(e.data.expiresAt)}`;
    case 'JobCompleted':
      return `job ${e.data.jobId} completed (lease ${e.data.leaseId})`;
    case 'JobFailed':
      return `job ${e.data.jobId} failed attempt ${e.data.attempt}: ${e.data.error}; ${e.data.retryAt === null ? 'no attempt left' : `retry at ${iso(e.data.retryAt)}`}`;
    case 'JobDead':
      return `job ${e.data.jobId} is dead: ${e.data.reason}`;
    case 'LeaseExpired':
      return `lease ${e.data.leaseId} of job ${e.data.jobId} expired (at ${iso(e.data.expiresAt)})`;
    case 'LeaseRevoked':
      // A running job's slot stays held until its handler stopped (or the lease lapsed), unless forced.
      return `lease ${e.data.leaseId} of job ${e.data.jobId} revoked by ${e.data.by}${e.data.cancel === true ? ' to cancel the job' : ''}${e.data.force === true ? ', forced: its slot goes now' : ''}`;
    case 'SlotReleased':
      return `job ${e.data.jobId} let its slot go (lease ${e.data.leaseId}): ${e.data.reason}`;
    case 'JobYielded':
      return `job ${e.data.jobId} gave its slot back (lease ${e.data.leaseId})${e.data.reason === undefined ? '' : `: ${e.data.reason}`}`;
    case 'JobCancelled':
      return `job ${e.data.jobId} cancelled by ${e.data.by}`;
    case 'ParkedDiscarded':
      return `parked job ${e.data.jobId} discarded by ${e.data.by}`;
    case 'JobRejected':
      return `job ${e.data.jobId} rejected: ${e.data.reason}`;
    case 'ParkedReplaced':
      return `parked job ${e.data.jobId} replaced by job ${e.data.by}`;
    case 'JobRetried':
      return `dead job ${e.data.jobId} retried by ${e.data.by}: ${e.data.maxAttempts} fresh ${e.data.maxAttempts === 1 ? 'attempt' : 'attempts'}, priority ${e.data.priority}${underLimits(e.data.limits)}`;
    case 'DeadDiscarded':
      return `dead job ${e.data.jobId} discarded by ${e.data.by}`;
    case 'KeyPaused':
      return `key paused by ${e.data.by}${e.data.reason === null ? '' : `: ${e.data.reason}`}`;
    case 'KeyResumed':
      return `key resumed by ${e.data.by}${e.data.reason === null ? '' : `: ${e.data.reason}`}`;
    case 'LimitWaiting':
      homes.set(e.data.jobId, e.data.home);
      return `${guest(e.data.jobId)} waits in this key's line (it is parked at home${underLimits(e.data.limits)})`;
    case 'LimitHeld':
      homes.set(e.data.jobId, e.data.home);
      return `${guest(e.data.jobId)} holds a slot of this key (lease ${e.data.leaseId}${e.data.waitedMs > 0 ? `, after ${waited(e.data.waitedMs)} waiting` : ''}${underLimits(e.data.limits)})`;
    case 'LimitReleased':
      return `${guest(e.data.jobId)} let its slot of this key go (lease ${e.data.leaseId}): ${e.data.reason}`;
    case 'LimitLeft':
      return `${guest(e.data.jobId)} left this key's line without a slot: ${e.data.reason}`;
  }
};

import * as t from 'io-ts';

// The key stream's events. Their names and fields are the audit format: add fields, never rename.
// Every event carries `at`, the decision time (epoch ms) from the injected clock, so folding
// needs nothing but the events.

const Time = t.number;
const JobId = t.string;
const LeaseId = t.string;

export const ReleaseReason = t.keyof({
  completed: null,
  failed: null,
  expired: null,
  revoked: null,
  yielded: null,
  cancelled: null,
});
export type ReleaseReason = t.TypeOf<typeof ReleaseReason>;

const event = <T extends string, P extends t.Props>(type: T, props: P) =>
  t.type({ type: t.literal(type), data: t.exact(t.type({ ...props, at: Time })) }, type);

/** An event with fields added after it first shipped: absent in older events, so optional. */
const eventWith = <T extends string, P extends t.Props, O extends t.Props>(type: T, props: P, added: O) =>
  t.type({ type: t.literal(type), data: t.exact(t.intersection([t.type({ ...props, at: Time }), t.partial(added)])) }, type);

/** What a job does when its key is full (or paused) at enqueue: park (the default), reject, or replace the parked ones of its name. */
export const WhenFull = t.keyof({ park: null, reject: null, replace: null }, 'WhenFull');
export type WhenFull = t.TypeOf<typeof WhenFull>;

/**
 * The dispatch message (queue_messages.msg_id) a lease ran under, in ledgers written before a job's
 * row became its message (migration 0015): absent since, and for a lease started by direct handoff.
 */
const MsgId = t.string;

export const KeyLimitSet = event('KeyLimitSet', {
  limit: t.number,
  leaseMs: t.number,
  /** Who changed it: absent when it came with an enqueue. */
  by: t.union([t.string, t.null]),
});
export const JobEnqueued = eventWith(
  'JobEnqueued',
  {
    jobId: JobId,
    name: t.string,
    args: t.unknown,
    queue: t.string,
    priority: t.number,
    maxAttempts: t.number,
    leaseMs: t.number,
    runAt: t.union([Time, t.null]),
  },
  /**
   * `solo`: the first event of a job's own stream (no key): the stream's limit is 1 and its lease
   * the job's, with no KeyLimitSet. `whenFull`: what the job does when its key is full at enqueue
   * (absent: park). `limits`: the further limit keys the job is under (a tenant's, an API's, its
   * queue's cap): it holds a slot in each of them and in its own key at once, or in none.
   */
  { solo: t.literal(true), whenFull: WhenFull, limits: t.array(t.string) },
);
/**
 * An admission holds its slot without expiry until a worker starts it (expiresAt null): a backlog
 * of admitted jobs nobody has read yet costs no events and no timers. Older events carry the
 * expiry the lease then had; it is not acted on.
 */
export const SlotAcquired = event('SlotAcquired', { jobId: JobId, leaseId: LeaseId, expiresAt: t.union([Time, t.null]) });
/**
 * How the key's line stood just before a job parked or waited in it: its limit, the slots held,
 * and whether it was paused (why the job waits: full, or paused). Recorded since issue 23, so a
 * job's explanation needs its own events only; older events lack it and are read by folding.
 */
export const LineAtWait = t.type({ limit: t.number, holding: t.number, paused: t.boolean });
export type LineAtWait = t.TypeOf<typeof LineAtWait>;
export const JobParked = eventWith('JobParked', { jobId: JobId }, { line: LineAtWait });
export const JobPromoted = event('JobPromoted', {
  jobId: JobId,
  leaseId: LeaseId,
  /** null, as for SlotAcquired. */
  expiresAt: t.union([Time, t.null]),
  waitedMs: t.number,
});
export const JobScheduled = event('JobScheduled', { jobId: JobId, runAt: Time });
export const JobStarted = eventWith(
  'JobStarted',
  { jobId: JobId, leaseId: LeaseId, workerId: t.string, attempt: t.number, expiresAt: Time },
  /** Before migration 0015: the message the worker read, whose visibility then followed the lease. */
  { msgId: MsgId },
);
export const LeaseRenewed = eventWith('LeaseRenewed', { jobId: JobId, leaseId: LeaseId, expiresAt: Time }, { msgId: MsgId });
export const JobCompleted = event('JobCompleted', { jobId: JobId, leaseId: LeaseId });
export const JobFailed = event('JobFailed', {
  jobId: JobId,
  leaseId: LeaseId,
  attempt: t.number,
  error: t.string,
  /** When the retry is due; null when no attempt is left. */
  retryAt: t.union([Time, t.null]),
});
export const JobDead = event('JobDead', { jobId: JobId, reason: t.string });
export const LeaseExpired = event('LeaseExpired', { jobId: JobId, leaseId: LeaseId, expiresAt: Time });
/**
 * An operator took the lease from its holder (release) or cancelled its job (`cancel`). A lease
 * nobody started is released in the same append. A started one is not: its handler may be
 * running, so the slot stays held until the worker says the handler stopped (SlotReleased
 * {revoked|cancelled}, or the job's own end) or the lease lapses (LeaseExpired), unless `force`:
 * the operator said no handler runs (its worker is gone), and the slot is released in the same
 * append. Events recorded before this rule always have their SlotReleased in the same append.
 */
export const LeaseRevoked = eventWith('LeaseRevoked', { jobId: JobId, leaseId: LeaseId, by: t.string }, { cancel: t.literal(true), force: t.literal(true) });
/** With msgId (before migration 0015): the lease's dispatch message, deleted in the same transaction. */
export const SlotReleased = eventWith('SlotReleased', { jobId: JobId, leaseId: LeaseId, reason: ReleaseReason }, { msgId: MsgId });
/**
 * `attempts`: the job's starts after the yield handed its attempt back (absent in older events).
 * A job given back by a worker that cannot run it says why (`reason`) and when it is offered
 * again (`retryAt`, the runAt of the JobScheduled that follows); a shutdown's yield has neither.
 */
export const JobYielded = eventWith('JobYielded', { jobId: JobId, leaseId: LeaseId }, { attempts: t.number, reason: t.string, retryAt: Time });
export const JobCancelled = event('JobCancelled', { jobId: JobId, by: t.string });
export const ParkedDiscarded = event('ParkedDiscarded', { jobId: JobId, by: t.string });
/**
 * An operator brought a dead job back (`by`): it keeps its id, gets a fresh set of attempts and is
 * admitted like an arrival, at the back of its line. It carries what the key's state needs of the
 * job (its JobEnqueued's), since a dead job has left the state.
 */
export const JobRetried = eventWith(
  'JobRetried',
  { jobId: JobId, by: t.string, queue: t.string, priority: t.number, maxAttempts: t.number, leaseMs: t.number },
  { limits: t.array(t.string) },
);
/** An operator dropped a dead job from the failed list for good (`by`); it changes no key state (a dead job has left it). */
export const DeadDiscarded = event('DeadDiscarded', { jobId: JobId, by: t.string });
/** A job with whenFull "reject" found its key full (or paused) at enqueue: it is recorded, and never runs. */
export const JobRejected = event('JobRejected', { jobId: JobId, reason: t.string });
/** A parked job dropped for a newer one of the same name with whenFull "replace" (a trailing debounce): `by` is the newer job. */
export const ParkedReplaced = event('ParkedReplaced', { jobId: JobId, by: JobId });
/** An operator paused the key: nothing new is admitted on it (holders finish, parked jobs keep their order) until KeyResumed. */
export const KeyPaused = event('KeyPaused', { by: t.string, reason: t.union([t.string, t.null]) });
/** The key runs again: its free slots go to the parked jobs in their order, in the same append. */
export const KeyResumed = event('KeyResumed', { by: t.string, reason: t.union([t.string, t.null]) });

// A limit key's record of the jobs of OTHER streams that are under its limit (JobEnqueued.limits):
// who waits in its line and who holds its slots, decided in the same append as the job's own
// events on its home stream (a promotion there is a LimitHeld here, a release a LimitReleased).
// `home`: the job's own stream; `limits`: every limit key the job is under.

/** The job waits in this key's line (it is parked at home: some limit of it is full). */
export const LimitWaiting = eventWith('LimitWaiting', { jobId: JobId, home: t.string, limits: t.array(t.string), priority: t.number }, { line: LineAtWait });
/** The job holds one of this key's slots, under the lease of its home stream. */
export const LimitHeld = event('LimitHeld', { jobId: JobId, home: t.string, limits: t.array(t.string), priority: t.number, leaseId: LeaseId, waitedMs: t.number });
/** The job's slot here is free again: its home released its lease, for `reason`. */
export const LimitReleased = event('LimitReleased', { jobId: JobId, leaseId: LeaseId, reason: ReleaseReason });
/** The job left this key's line without a slot (cancelled, discarded or replaced while parked). */
export const LimitLeft = event('LimitLeft', { jobId: JobId, reason: t.string });

export const KeyEvent = t.union([
  KeyLimitSet,
  JobEnqueued,
  SlotAcquired,
  JobParked,
  JobPromoted,
  JobScheduled,
  JobStarted,
  LeaseRenewed,
  JobCompleted,
  JobFailed,
  JobDead,
  LeaseExpired,
  LeaseRevoked,
  SlotReleased,
  JobYielded,
  JobCancelled,
  ParkedDiscarded,
  JobRejected,
  ParkedReplaced,
  KeyPaused,
  KeyResumed,
  JobRetried,
  DeadDiscarded,
  LimitWaiting,
  LimitHeld,
  LimitReleased,
  LimitLeft,
]);
export type KeyEvent = t.TypeOf<typeof KeyEvent>;

/** Each event's codec by its type: decoding one event tries its own codec, not each member of the union in turn. */
export const KeyEventCodecs: ReadonlyMap<string, t.Mixed> = new Map(KeyEvent.types.map((codec) => [codec.name, codec]));
export type KeyEventType = KeyEvent['type'];
export type EventOf<T extends KeyEventType> = Extract<KeyEvent, { type: T }>;
export type EventData<T extends KeyEventType> = EventOf<T>['data'];

export const mk = <T extends KeyEventType>(type: T, data: EventData<T>): EventOf<T> =>
  ({ type, data }) as EventOf<T>;

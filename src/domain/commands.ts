import * as E from 'fp-ts/lib/Either.js';
import * as t from 'io-ts';
import { WhenFull } from './events.js';
import { Jitter, JsonArgs, Key, LeaseMs, Limit, MaxAttempts, Name, NonEmptyString, Priority, QueueName, Time, ValidationError, decodeWith, refine } from './values.js';

// The commands a key's decider takes, as io-ts codecs: the command layer decodes every command
// with them before deciding, so the decider trusts their shape and guards only what depends on
// the key's state.

const Id = NonEmptyString(200);
const By = NonEmptyString(200);

/** The most further limits one job may be under. */
export const MAX_LIMITS_PER_JOB = 16;

/** A further limit key a job is under; `limit` sets the key's limit at its first use (1 when absent), as a key's own does. */
export const LimitRef = t.intersection([t.type({ key: Key }), t.partial({ limit: Limit })]);
export type LimitRef = t.TypeOf<typeof LimitRef>;
export const LimitRefs = refine(
  t.array(LimitRef),
  'Limits',
  (ls) => ls.length <= MAX_LIMITS_PER_JOB && new Set(ls.map((l) => l.key)).size === ls.length,
  `must be at most ${MAX_LIMITS_PER_JOB} limit keys, each named once`,
) as t.Type<LimitRef[], LimitRef[], unknown>;

export const JobSpec = t.intersection([
  t.type({
    jobId: Id,
    name: Name,
    /** JSON handed to the handler. */
    args: JsonArgs,
    queue: QueueName,
    /** Smaller runs first. */
    priority: Priority,
    maxAttempts: MaxAttempts,
    /** When the job is due (epoch ms); due at once when null or not later than now. */
    runAt: t.union([Time, t.null]),
  }),
  /**
   * The job's own lease (the key's lease when absent), what happens when it finds its key full
   * (park when absent; see WhenFull), and the further limit keys it is under besides its stream's
   * own (never that one): it runs only with a slot in every one of them.
   */
  t.partial({ leaseMs: LeaseMs, whenFull: WhenFull, limits: LimitRefs }),
]);
export type JobSpec = t.TypeOf<typeof JobSpec>;

/** The key's limit and lease as an enqueue sees them; absent means "keep the key's" (DEFAULT_LIMIT and DEFAULT_LEASE_MS for a new key). */
const KeyPolicy = t.partial({
  limit: Limit,
  leaseMs: LeaseMs,
  /**
   * The enqueue may change the key's recorded limit (a job definition that owns its key's limit).
   * Without it an enqueue naming another limit is refused: two job types sharing a key would
   * otherwise flip its limit back and forth.
   */
  ownsLimit: t.literal(true),
  /**
   * The stream is the job's own (a job without a key): it is admitted at once, and its JobEnqueued
   * says so instead of a KeyLimitSet of 1 that no key would ever read.
   */
  solo: t.literal(true),
});

const command = <T extends string, P extends t.Props>(type: T, props: P) => t.type({ type: t.literal(type), ...props }, type);
const withOptional = <A extends t.Mixed, P extends t.Props>(base: A, optional: P) => t.intersection([base, t.partial(optional)]);

export const Enqueue = t.intersection([command('Enqueue', { job: JobSpec }), KeyPolicy]);
/** A batch for one key in one append, admitted in order against the limit like single enqueues. */
export const EnqueueMany = t.intersection([command('EnqueueMany', { jobs: t.array(JobSpec) }), KeyPolicy]);
/** Scheduled jobs (and retries) whose time has come take a free slot or park. */
export const AdmitDue = command('AdmitDue', {});
/** `msgId`: the dispatch message the worker read, recorded on JobStarted (the ledger's workers give none since migration 0015: a job's row is its message). */
export const Start = withOptional(command('Start', { jobId: Id, leaseId: Id, workerId: Id }), { msgId: NonEmptyString(30) });
export const Renew = command('Renew', { jobId: Id, leaseId: Id });
/**
 * Direct handoff: the worker whose job just ended takes over the job its release promotes (the
 * first one on its queue), started in the same append, so the next job needs no queue hop.
 */
const HandOffTo = t.type({ workerId: Id, queue: QueueName });
export const Complete = withOptional(command('Complete', { jobId: Id, leaseId: Id }), { handOffTo: HandOffTo });
/** `jitter` spreads the retry; the caller draws it so the decider stays pure. */
export const Fail = withOptional(command('Fail', { jobId: Id, leaseId: Id, error: t.string, jitter: Jitter }), { handOffTo: HandOffTo });
/** The longest a yielded job may be put off (a day). */
export const MAX_YIELD_DELAY_MS = 24 * 3_600_000;
const YieldDelayMs = refine(
  t.number,
  'YieldDelayMs',
  (n) => Number.isSafeInteger(n) && n >= 1 && n <= MAX_YIELD_DELAY_MS,
  `must be an integer number of milliseconds from 1 to ${MAX_YIELD_DELAY_MS}`,
);
/**
 * The slot goes back and the attempt is not counted. Without `delayMs` (graceful shutdown) the job
 * waits in line again at once; with it (a worker that cannot run the job: no handler for its
 * name) it is offered again after that delay, holding no slot meanwhile. `reason` is for the audit.
 * `deadAfterMs`: a job given back for this long since its first give-back (no worker knows its
 * `name`) is dead instead, and retryable once a worker knows it (issue 21, item 6).
 */
export const Yield = withOptional(command('Yield', { jobId: Id, leaseId: Id }), { delayMs: YieldDelayMs, reason: NonEmptyString(1_000), deadAfterMs: YieldDelayMs, name: Name });
/**
 * The worker's handler under a revoked lease (a release, a cancel) has stopped: the slot passes
 * on, and the job is retried (a release) or cancelled. Refused for a lease nobody revoked.
 */
export const Stopped = command('Stopped', { jobId: Id, leaseId: Id, jitter: Jitter });
/**
 * Reclaims every holder of the key whose lease has run out by `now`. `graceFrom` (epoch ms): its
 * workers could not renew before then (the database was away): no lease runs out sooner than one
 * lease length after it (issue 21, item 7). `streamGrace`: when each of these streams could be read
 * again after a quarantine (epoch ms): a holder's lease gets one lease length from that of its own
 * stream and of each of its further limit keys, since its result (which releases it on all of
 * them) could not be recorded before.
 */
export const ExpireLeases = withOptional(command('ExpireLeases', { jitter: Jitter }), { graceFrom: Time, streamGrace: t.record(t.string, Time) });
export const SetLimit = withOptional(command('SetLimit', { limit: Limit, by: By }), { leaseMs: LeaseMs });
/**
 * A process's configuration names the key's limit (a queue's cap): recorded if the key has none
 * yet, nothing if it is the same, and refused (LimitMismatch) if the ledger holds another: only
 * an operator's SetLimit changes a limit the ledger holds.
 */
export const DeclareLimit = command('DeclareLimit', { limit: Limit, by: By });
/**
 * One holder (jobId) or every holder of the key. A running holder's slot passes on once its
 * handler stopped (or its lease lapsed), unless `force`: the operator says no handler runs (its
 * worker is gone), and the slot passes on at once.
 */
export const RevokeLease = withOptional(command('RevokeLease', { by: By, jitter: Jitter }), { jobId: Id, force: t.literal(true) });
/** Some parked jobs (jobIds) or all of them. */
export const DiscardParked = withOptional(command('DiscardParked', { by: By }), { jobIds: t.array(Id) });
export const Cancel = command('Cancel', { jobId: Id, by: By });
/** An operator's reason for a pause or a resume. */
export const MAX_REASON_LENGTH = 500;
export const Reason = NonEmptyString(MAX_REASON_LENGTH);
/** Stops admissions on the key (holders finish, parked jobs keep their order), recorded with who and why. */
export const PauseKey = withOptional(command('PauseKey', { by: By }), { reason: Reason });
/** Admits on the key again: its free slots go to the parked jobs at once. */
export const ResumeKey = withOptional(command('ResumeKey', { by: By }), { reason: Reason });
/**
 * Serves the key's line from `after` (from its head when absent): the second step of a release
 * whose line reached jobs under further limits that the first decision did not have the streams of.
 */
export const FillSlots = withOptional(command('FillSlots', {}), { after: t.type({ priority: t.number, seq: t.number }) });

/**
 * Brings a dead job back on its home stream. The job has left the key's state, so the command
 * carries what its JobEnqueued said (the command layer reads it from the ledger): the decider
 * refuses a job the state still holds (NotDead), and the command layer one that is not dead.
 */
export const RetryJob = command('RetryJob', {
  jobId: Id,
  by: By,
  job: t.intersection([
    t.type({ queue: QueueName, priority: Priority, maxAttempts: MaxAttempts, leaseMs: LeaseMs }),
    t.partial({ limits: t.array(Key) }),
  ]),
});
/** Drops a dead job from the failed list for good, recorded on its home stream. */
export const DiscardDead = command('DiscardDead', { jobId: Id, by: By });

const codecs = {
  Enqueue,
  EnqueueMany,
  AdmitDue,
  Start,
  Renew,
  Complete,
  Fail,
  Yield,
  Stopped,
  ExpireLeases,
  SetLimit,
  DeclareLimit,
  RevokeLease,
  PauseKey,
  ResumeKey,
  FillSlots,
  DiscardParked,
  Cancel,
  RetryJob,
  DiscardDead,
};

export type Command = { [K in keyof typeof codecs]: t.TypeOf<(typeof codecs)[K]> }[keyof typeof codecs];
export type CommandType = Command['type'];
export type CommandOf<T extends CommandType> = Extract<Command, { type: T }>;
export type KeyPolicy = t.TypeOf<typeof KeyPolicy>;

/** Decodes a command by its `type`, failing with the field at fault. */
export const decodeCommand = (input: unknown): E.Either<ValidationError, Command> => {
  const type = (input as { type?: unknown } | null)?.type;
  if (typeof type !== 'string' || !Object.hasOwn(codecs, type)) {
    return E.left(new ValidationError('type', `must be one of ${Object.keys(codecs).join(', ')}`));
  }
  return decodeWith<Command>(codecs[type as CommandType] as t.Decoder<unknown, Command>, input);
};

export const DEFAULT_LIMIT = 1;
export const DEFAULT_LEASE_MS = 30_000;

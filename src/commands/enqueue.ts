import { randomUUID } from 'node:crypto';
import * as E from 'fp-ts/lib/Either.js';
import * as t from 'io-ts';
import { v5 as uuidv5 } from 'uuid';
import { LimitRefs, type Command, type JobSpec } from '../domain/commands.js';
import { WhenFull, type KeyEvent } from '../domain/events.js';
import { LimitConflictError, RefusedError } from '../domain/errors.js';
import { DuplicateEventIdError } from '../domain/ports/event-store.js';
import { streamFor } from '../domain/streams.js';
import { JsonArgs, Key, LeaseMs, Limit, MaxAttempts, Name, NonEmptyString, Priority, QueueName, ValidationError, decodeWith, refine } from '../domain/values.js';
import type { KeyCommand } from './key-command.js';
import type { KeyWriter } from './key-writer.js';

/** What a caller gives to enqueue a job. */
export interface EnqueueInput {
  readonly name: string;
  readonly args?: unknown;
  /** The concurrency key; a job without one is admitted at once. */
  readonly key?: string | null;
  /**
   * At most this many jobs of the key run at once (default 1). The key's first enqueue sets it;
   * a later enqueue naming another limit is refused (LimitConflictError) unless it owns the limit.
   */
  readonly limit?: number;
  /** This enqueue may change the key's limit to `limit` (a job definition that owns its key's limit). */
  readonly ownsLimit?: boolean;
  /** Lease in ms: how long a worker may stay silent before its slot is reclaimed (default 30 s, at least 1 s). */
  readonly leaseMs?: number;
  /** Smaller runs first (default 0). */
  readonly priority?: number;
  /** When to run: a Date, an ISO-8601 string or epoch ms. */
  readonly runAt?: Date | string | number;
  /** Or run this many ms from now. */
  readonly delayMs?: number;
  /** Starts before the job is dead (default 5). */
  readonly maxAttempts?: number;
  readonly queue?: string;
  /** Defaults to a random UUID. Enqueuing a jobId again records nothing new. */
  readonly jobId?: string;
  /**
   * When the key is full (or paused) at enqueue: `park` (the default) waits in line; `reject`
   * records the job as rejected and it never runs (status 'rejected'); `replace` parks it in place
   * of the parked jobs of the same name enqueued with `replace` (a trailing debounce).
   */
  readonly whenFull?: WhenFull;
  /**
   * Further limit keys the job is under besides its key (a tenant's, an external API's): it runs
   * only with a slot in its key and in every one of these at once. `limit` sets a limit key's
   * limit at its first use (1 when absent) and is held to it later, as `limit` is for the key.
   */
  readonly limits?: readonly LimitInput[];
}

export interface LimitInput {
  readonly key: string;
  readonly limit?: number;
}

export type EnqueueStatus = 'acquired' | 'parked' | 'scheduled' | 'rejected' | 'duplicate';

export interface Enqueued {
  readonly jobId: string;
  readonly stream: string;
  readonly status: EnqueueStatus;
}

export const DEFAULT_QUEUE = 'default';
export const DEFAULT_MAX_ATTEMPTS = 5;

/** Namespace of the JobEnqueued event ids: uuidv5(jobId) makes a given job id's enqueue event findable by id, and unique in the store. */
const JOB_ENQUEUED_NAMESPACE = '0b7c5f0e-4a43-4f5e-9a59-2f4b7c3d1e60';
export const enqueuedEventId = (jobId: string): string => uuidv5(jobId, JOB_ENQUEUED_NAMESPACE);

/** The event ids the handler gives decided events: a JobEnqueued's is derived from its job id. */
export const keyEventId = (_stream: string, event: KeyEvent): string | undefined =>
  event.type === 'JobEnqueued' ? enqueuedEventId(event.data.jobId) : undefined;

const RunAtInput = new t.Type<number, number, unknown>(
  'RunAt',
  (u): u is number => typeof u === 'number',
  (u, c) => {
    const ms = u instanceof Date ? u.getTime() : typeof u === 'string' && u.trim() !== '' ? Date.parse(u) : typeof u === 'number' ? u : NaN;
    return Number.isSafeInteger(ms) && ms >= 0 && ms <= 253_402_300_799_999 ? t.success(ms) : t.failure(u, c, 'must be a Date, an ISO-8601 time or epoch milliseconds');
  },
  t.identity,
);
const DelayMs = refine(t.number, 'DelayMs', (n) => Number.isSafeInteger(n) && n >= 0, 'must be a whole number of milliseconds, 0 or more');
const Optional = <C extends t.Mixed>(c: C) => t.union([c, t.undefined]);

const EnqueueInputCodec = t.type({
  name: Name,
  args: Optional(JsonArgs),
  key: t.union([Key, t.null, t.undefined]),
  limit: Optional(Limit),
  ownsLimit: Optional(t.boolean),
  leaseMs: Optional(LeaseMs),
  priority: Optional(Priority),
  runAt: Optional(RunAtInput),
  delayMs: Optional(DelayMs),
  maxAttempts: Optional(MaxAttempts),
  queue: Optional(QueueName),
  jobId: Optional(NonEmptyString(200)),
  whenFull: Optional(WhenFull),
  limits: Optional(LimitRefs),
});

interface Planned {
  /** The caller chose the job id: it may have been enqueued before, so the store is asked. */
  readonly givenId: boolean;
  readonly stream: string;
  readonly key: string | null;
  readonly limit: number | undefined;
  readonly ownsLimit: boolean;
  readonly leaseMs: number | undefined;
  readonly job: JobSpec;
}

/** Checks one input and turns it into a job for its key's stream; the error names the field. */
export const planEnqueue = (input: EnqueueInput, now: number, field = ''): Planned => {
  const fail = (f: string, problem: string) => new ValidationError(field + f, problem);
  if (typeof input !== 'object' || input === null) throw fail('(input)', 'must be an object');
  const decoded = decodeWith(EnqueueInputCodec, input);
  if (E.isLeft(decoded)) throw fail(decoded.left.field, decoded.left.problem);
  const i = decoded.right;
  if (i.runAt !== undefined && i.delayMs !== undefined) throw fail('delayMs', 'give runAt or delayMs, not both');
  if (i.key == null && i.limit !== undefined) throw fail('limit', 'needs a key: a job without a key is admitted at once');
  if (i.key == null && i.whenFull !== undefined) throw fail('whenFull', 'needs a key: a job without a key is admitted at once');
  const jobId = i.jobId ?? randomUUID();
  const key = i.key ?? null;
  const own = (i.limits ?? []).findIndex((l) => l.key === key);
  if (own >= 0) throw fail(`limits[${own}].key`, 'is the job\'s own key: name each further limit key once, not the key itself');
  const queue = i.queue ?? DEFAULT_QUEUE;
  // A queue's cap is not added here: the decision reads it from the ledger (Decision.queueCap).
  const limits = i.limits ?? [];
  return {
    givenId: i.jobId !== undefined,
    stream: streamFor(key, jobId),
    key,
    limit: key === null ? 1 : i.limit,
    ownsLimit: key !== null && i.ownsLimit === true,
    // A keyed job's lease is its own, and the key's too when it is the key's first enqueue.
    leaseMs: i.leaseMs,
    job: {
      jobId,
      name: i.name,
      args: i.args ?? null,
      queue,
      priority: i.priority ?? 0,
      maxAttempts: i.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
      runAt: i.runAt ?? (i.delayMs !== undefined ? now + i.delayMs : null),
      ...(key !== null && i.leaseMs !== undefined ? { leaseMs: i.leaseMs } : {}),
      ...(i.whenFull !== undefined && i.whenFull !== 'park' ? { whenFull: i.whenFull } : {}),
      ...(limits.length > 0 ? { limits } : {}),
    },
  };
};

const statusOf = (jobId: string, events: readonly KeyEvent[]): EnqueueStatus => {
  for (const e of events) {
    if (!('jobId' in e.data) || e.data.jobId !== jobId) continue;
    if (e.type === 'SlotAcquired' || e.type === 'JobPromoted') return 'acquired';
    if (e.type === 'JobParked') return 'parked';
    if (e.type === 'JobScheduled') return 'scheduled';
    if (e.type === 'JobRejected') return 'rejected';
  }
  return 'duplicate';
};

/**
 * Enqueues jobs that may span many keys in ONE transaction: the jobs of a key go into one
 * EnqueueMany (one append, admitted in order against the limit — pgbus #413 and pg-boss #861 had
 * bulk paths that skipped it), and every key's append carries its own expected revision.
 * A job id seen before — still active or long finished — records nothing new.
 */
export const enqueueMany = async (
  handler: KeyWriter,
  inputs: readonly EnqueueInput[],
  options: { readonly now: () => number; readonly recorded: (eventIds: readonly string[]) => Promise<ReadonlySet<string>>; readonly metadata?: Record<string, unknown> },
): Promise<Enqueued[]> => {
  if (!Array.isArray(inputs)) throw new ValidationError('jobs', 'must be an array');
  const now = options.now();
  const planned = inputs.map((input, i) => planEnqueue(input, now, inputs.length > 1 ? `jobs[${i}].` : ''));
  const ids = new Set<string>();
  planned.forEach(({ job }, i) => {
    if (ids.has(job.jobId)) throw new ValidationError(`jobs[${i}].jobId`, `${job.jobId} appears twice in the batch`);
    ids.add(job.jobId);
  });
  const eventsByStream = await recordFresh(handler, planned, options);
  return planned.map(({ job, stream }) => ({ jobId: job.jobId, stream, status: statusOf(job.jobId, eventsByStream.get(stream) ?? []) }));
};

/**
 * Drops the jobs whose enqueue is already recorded, then decides and appends the rest. A job of
 * the batch recorded by someone else between the check and the append makes the store refuse the
 * whole append (the JobEnqueued event id of a given job id is unique); the check then runs again.
 * A job id made up here needs no check: nobody else can know it.
 */
const recordFresh = async (
  handler: KeyWriter,
  planned: readonly Planned[],
  options: { readonly recorded: (eventIds: readonly string[]) => Promise<ReadonlySet<string>>; readonly metadata?: Record<string, unknown> },
): Promise<Map<string, KeyEvent[]>> => {
  for (let attempt = 1; ; attempt++) {
    // A random UUID of ours cannot have been recorded before: only given ids cost a lookup.
    const given = planned.filter((p) => p.givenId).map((p) => enqueuedEventId(p.job.jobId));
    const seen = given.length > 0 ? await options.recorded(given) : new Set<string>();
    const batches = batchByKey(seen.size === 0 ? planned : planned.filter((p) => !p.givenId || !seen.has(enqueuedEventId(p.job.jobId))), options.metadata);
    try {
      // Atomic: a batch with one refused key (a limit other than its recorded one) writes nothing.
      const results = await handler.executeMany(batches, { atomic: true });
      const eventsByStream = new Map<string, KeyEvent[]>();
      results.forEach((r, i) => {
        // An atomic submission with a refusal is rejected, never resolved: a Left here is a broken invariant.
        if (E.isLeft(r)) throw new Error(`enqueue refused: ${JSON.stringify(r.left)}`);
        const stream = batches[i]!.stream;
        eventsByStream.set(stream, [...(eventsByStream.get(stream) ?? []), ...r.right.events]);
      });
      return eventsByStream;
    } catch (error) {
      if (error instanceof RefusedError && error.error.tag === 'LimitMismatch') {
        const key = error.error.key ?? planned.find((p) => p.stream === error.stream)?.key ?? String(error.stream);
        throw new LimitConflictError(key, error.error.recorded, error.error.requested, error.stream);
      }
      if (!(error instanceof DuplicateEventIdError) || attempt >= 3) throw error;
    }
  }
};

/** Consecutive jobs of one stream with the same limit (and ownership of it) and lease become one EnqueueMany. */
const groups = (planned: readonly Planned[]): Planned[][] => {
  const out: Planned[][] = [];
  for (const p of planned) {
    const last = out[out.length - 1];
    const head = last?.[0];
    if (last && head && head.stream === p.stream && head.limit === p.limit && head.ownsLimit === p.ownsLimit && head.leaseMs === p.leaseMs) last.push(p);
    else out.push([p]);
  }
  return out;
};

const batchByKey = (planned: readonly Planned[], metadata: Record<string, unknown> | undefined): KeyCommand[] =>
  groups(planned).map((g) => {
    const head = g[0]!;
    const command: Command = {
      type: 'EnqueueMany',
      jobs: g.map((p) => p.job),
      ...(head.limit !== undefined ? { limit: head.limit } : {}),
      ...(head.ownsLimit ? { ownsLimit: true as const } : {}),
      ...(head.leaseMs !== undefined ? { leaseMs: head.leaseMs } : {}),
      ...(head.key === null ? { solo: true as const } : {}),
    };
    // A job without a key has a stream of its own, named after a UUID made up here (nothing can
    // be in it) or a given id the store had not recorded: decided on as empty, unread and unlocked.
    const newStream = head.key === null ? { newStream: true as const } : {};
    const madeUp = new Set(g.filter((p) => !p.givenId).map((p) => p.job.jobId));
    return { stream: head.stream, command, ...(metadata ? { metadata } : {}), ...newStream, ...(madeUp.size > 0 ? { madeUpJobIds: madeUp } : {}) };
  });

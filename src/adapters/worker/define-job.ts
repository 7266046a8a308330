import type { EnqueueInput, LimitInput } from '../../commands/enqueue.js';
import type { WhenFull } from '../../domain/events.js';
import type { Logger } from '../../domain/ports/logger.js';

/** What a handler gets besides its arguments. */
export interface JobContext {
  readonly jobId: string;
  /** The concurrency key; null for a job without one. */
  readonly key: string | null;
  /** 1 for the first start, 2 for the first retry, … */
  readonly attempt: number;
  /** The lease this run holds the job's slot under (its id in the audit: JobStarted, SlotReleased). */
  readonly leaseId: string;
  /** Aborted when the job's lease is revoked or expired (another run may start), or at shutdown past the grace period. */
  readonly signal: AbortSignal;
  /** A pino child logger carrying jobId, key and attempt. */
  readonly log: Logger;
}

export type JobHandler<A = unknown> = (args: A, ctx: JobContext) => unknown;

/**
 * A job type's policy declared once, as solid_queue's `limits_concurrency to:, key:` does: every
 * enqueue of the job derives its key and limit from its args, so a limit cannot drift between
 * call sites. Options given at enqueue override these.
 */
export interface JobDefinition<A = unknown> {
  readonly name: string;
  readonly handler: JobHandler<A>;
  readonly queue?: string;
  /** The concurrency key for these args; no key means the job is admitted at once. */
  readonly key?: (args: A) => string;
  /** At most this many jobs of one key run at once. */
  readonly limit?: number;
  /**
   * This job type owns its keys' limit: its enqueues change a key's recorded limit to `limit`.
   * Without it, an enqueue whose limit differs from the key's is refused (LimitConflictError).
   */
  readonly ownsLimit?: boolean;
  /** When its key is full at enqueue: park (the default), reject, or replace the parked ones of this name (a trailing debounce). */
  readonly whenFull?: WhenFull;
  /** Further limit keys for these args (a tenant's, an API's): the job runs only with a slot in each of them and in its key at once. */
  readonly limits?: (args: A) => readonly LimitInput[];
  /** Lease in ms: how long a worker may stay silent before the slot is reclaimed. */
  readonly lease?: number;
  readonly maxAttempts?: number;
  readonly priority?: number;
}

const DEFINITION = Symbol.for('jobledger.JobDefinition');

export const defineJob = <A>(definition: JobDefinition<A>): JobDefinition<A> => Object.assign(Object.create(null), definition, { [DEFINITION]: true });

export const isJobDefinition = (value: unknown): value is JobDefinition =>
  typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[DEFINITION] === true;

/**
 * A handlers module's default export: job name -> plain function or definition. A plain function's
 * args are `any` (the JSON its enqueue gave): an inline `async (args, ctx) => …` reads them as
 * written, and a function that declares their type is taken as it is. (`never` accepted the
 * latter too, but typed an inline handler's args `never`: `args.invoice` did not compile.)
 */
export type HandlerMap = Readonly<Record<string, JobHandler<any> | JobDefinition<never>>>;

/** Job name -> handler: a plain function under its export name, a definition under its own name. */
export const handlerTable = (handlers: HandlerMap): ReadonlyMap<string, JobHandler> =>
  new Map(
    Object.entries(handlers).flatMap(([exportName, entry]): [string, JobHandler][] =>
      isJobDefinition(entry) ? [[entry.name, entry.handler as JobHandler]] : typeof entry === 'function' ? [[exportName, entry as JobHandler]] : [],
    ),
  );

/** Options an enqueue of a defined job may override: anything an enqueue takes but its name and args. */
export type JobOverrides = Omit<EnqueueInput, 'name' | 'args'>;

/** The enqueue a definition implies for these args, with the call site's overrides on top. */
export const inputFor = <A>(job: JobDefinition<A>, args: A, overrides: JobOverrides = {}) => ({
  name: job.name,
  args,
  ...(job.key ? { key: job.key(args) } : {}),
  ...(job.limit !== undefined ? { limit: job.limit } : {}),
  ...(job.ownsLimit === true ? { ownsLimit: true } : {}),
  ...(job.whenFull !== undefined ? { whenFull: job.whenFull } : {}),
  ...(job.limits ? { limits: job.limits(args) } : {}),
  ...(job.lease !== undefined ? { leaseMs: job.lease } : {}),
  ...(job.priority !== undefined ? { priority: job.priority } : {}),
  ...(job.maxAttempts !== undefined ? { maxAttempts: job.maxAttempts } : {}),
  ...(job.queue !== undefined ? { queue: job.queue } : {}),
  ...overrides,
});

import * as E from 'fp-ts/lib/Either.js';
import { decodeCommand, type Command } from '../domain/commands.js';
import { RefusedError, UnknownJobError, UnknownKeyError } from '../domain/errors.js';
import type { KeyEvent } from '../domain/events.js';
import type { JsonObject } from '../domain/ports/event-store.js';
import type { JobStreamLookup } from '../domain/ports/job-streams.js';
import { keyStream } from '../domain/streams.js';
import { Key, ValidationError, checkField } from '../domain/values.js';
import type { CommandResult, Loaded } from './key-command.js';

// The operator's actions on a key, each one command of the key's decider, recorded in the ledger
// with who did it (`by`). Inputs are checked before anything is read or written; a refusal
// writes nothing.

export interface OperatorDeps {
  readonly execute: (stream: string, command: Command, metadata?: JsonObject) => Promise<CommandResult>;
  readonly load: (stream: string) => Promise<Loaded>;
  readonly jobStream: JobStreamLookup;
  /** [0, 1): the retry jitter of a revoked job that had started. */
  readonly random: () => number;
}

/** Checks the command's fields (ValidationError naming the one at fault) before anything is read. */
const checked = <C extends Command>(command: C): C => {
  const decoded = decodeCommand(command);
  if (E.isLeft(decoded)) throw decoded.left;
  return command;
};

/** The key's stream, once the key is known to exist: an action on a mistyped key must not create it. */
const existingKey = async (deps: OperatorDeps, key: string): Promise<string> => {
  const stream = keyStream(key);
  if ((await deps.load(stream)).revision === 'no_stream') throw new UnknownKeyError(key);
  return stream;
};

const run = async (deps: OperatorDeps, stream: string, command: Command, metadata: JsonObject | undefined): Promise<readonly KeyEvent[]> => {
  const result = await deps.execute(stream, command, metadata);
  if (E.isLeft(result)) throw new RefusedError(result.left);
  return result.right.events;
};

const jobIdsOf = (events: readonly KeyEvent[], type: KeyEvent['type']): string[] =>
  events.filter((e) => e.type === type).map((e) => (e.data as { jobId: string }).jobId);

/** What a release did: every lease it revoked, and of those the running ones whose slot passes on only once their handler stopped. */
export interface Released {
  readonly released: string[];
  /** Running jobs: their handlers are told to stop; each slot passes on when the worker says it stopped, or when its lease lapses. */
  readonly stopping: string[];
}

export interface ReleaseInput {
  readonly key: string;
  /** Only this holder; every holder of the key when absent. */
  readonly jobId?: string;
  readonly by: string;
  /**
   * Free the slots of running holders now, not once their handlers stopped: only when no handler
   * runs (its worker is gone, its lease long). Recorded as forced (LeaseRevoked force).
   */
  readonly force?: boolean;
}

/**
 * Force-releases one holder (jobId) or every holder of the key: RevokeLease. A holder nobody
 * started lets its slot go at once; a running one's handler is told to stop first (invariant 8),
 * unless `force`.
 */
export const release = async (deps: OperatorDeps, input: ReleaseInput, metadata?: JsonObject): Promise<Released> => {
  const key = checkField('key', Key, input.key);
  if (input.force !== undefined && typeof input.force !== 'boolean') throw new ValidationError('force', 'must be true or false');
  const command = checked<Command>({ type: 'RevokeLease', by: input.by, jitter: deps.random(), ...(input.jobId !== undefined ? { jobId: input.jobId } : {}), ...(input.force === true ? { force: true } : {}) });
  const events = await run(deps, await existingKey(deps, key), command, metadata);
  const freed = new Set(jobIdsOf(events, 'SlotReleased'));
  const released = jobIdsOf(events, 'LeaseRevoked');
  return { released, stopping: released.filter((jobId) => !freed.has(jobId)) };
};

/** Drops some parked jobs (jobIds) or all of them: DiscardParked. */
export const discard = async (deps: OperatorDeps, input: { readonly key: string; readonly jobIds?: readonly string[]; readonly by: string }, metadata?: JsonObject): Promise<{ discarded: string[] }> => {
  const key = checkField('key', Key, input.key);
  const command = checked<Command>({ type: 'DiscardParked', by: input.by, ...(input.jobIds !== undefined ? { jobIds: input.jobIds as string[] } : {}) });
  const events = await run(deps, await existingKey(deps, key), command, metadata);
  return { discarded: jobIdsOf(events, 'ParkedDiscarded') };
};

/** Changes the key's limit, and its lease when `leaseMs` is given: SetLimit. A raise promotes parked jobs at once; a lowered limit preempts no one. */
export const setLimit = async (deps: OperatorDeps, input: { readonly key: string; readonly limit: number; readonly leaseMs?: number; readonly by: string }, metadata?: JsonObject): Promise<{ limit: number; promoted: string[] }> => {
  const key = checkField('key', Key, input.key);
  const command = checked<Command>({ type: 'SetLimit', limit: input.limit, by: input.by, ...(input.leaseMs === undefined ? {} : { leaseMs: input.leaseMs }) });
  const events = await run(deps, await existingKey(deps, key), command, metadata);
  return { limit: input.limit, promoted: jobIdsOf(events, 'JobPromoted') };
};

/** Stops admissions on the key (PauseKey): holders finish, parked jobs keep their order. Refused when already paused. */
export const pause = async (deps: OperatorDeps, input: { readonly key: string; readonly by: string; readonly reason?: string }, metadata?: JsonObject): Promise<{ paused: true }> => {
  const key = checkField('key', Key, input.key);
  const command = checked<Command>({ type: 'PauseKey', by: input.by, ...(input.reason !== undefined ? { reason: input.reason } : {}) });
  await run(deps, await existingKey(deps, key), command, metadata);
  return { paused: true };
};

/** Admits on the key again (ResumeKey): its free slots go to the parked jobs at once. Refused when it is not paused. */
export const resume = async (deps: OperatorDeps, input: { readonly key: string; readonly by: string; readonly reason?: string }, metadata?: JsonObject): Promise<{ promoted: string[] }> => {
  const key = checkField('key', Key, input.key);
  const command = checked<Command>({ type: 'ResumeKey', by: input.by, ...(input.reason !== undefined ? { reason: input.reason } : {}) });
  const events = await run(deps, await existingKey(deps, key), command, metadata);
  return { promoted: jobIdsOf(events, 'JobPromoted') };
};

/** What a cancel did. */
export interface Cancelled {
  /** false: the job had already finished; nothing changed. */
  readonly cancelled: boolean;
  /** The job is running: its handler is told to stop, and it is cancelled (its slot passing on) when the worker says it stopped, or when its lease lapses. */
  readonly stopping: boolean;
}

/**
 * Cancels a scheduled, parked or running job: Cancel on the job's stream (found in jl_jobs). A job
 * already finished is not cancelled (false); a holder's slot goes to the next parked job, a
 * running one's once its handler stopped.
 */
export const cancel = async (deps: OperatorDeps, input: { readonly jobId: string; readonly by: string }, metadata?: JsonObject): Promise<Cancelled> => {
  const command = checked<Command>({ type: 'Cancel', jobId: input.jobId, by: input.by });
  const stream = await deps.jobStream(input.jobId);
  if (stream === null) throw new UnknownJobError(input.jobId);
  const result = await deps.execute(stream, command, metadata);
  if (E.isRight(result)) return { cancelled: true, stopping: !result.right.events.some((e) => e.type === 'JobCancelled') };
  if (result.left.tag === 'JobNotFound') return { cancelled: false, stopping: false };
  throw new RefusedError(result.left);
};

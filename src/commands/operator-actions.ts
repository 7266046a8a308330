import * as E from 'fp-ts/lib/Either.js';
import { decodeCommand, type Command } from '../domain/commands.js';
import { RefusedError, UnknownJobError, UnknownKeyError } from '../domain/errors.js';
import type { KeyEvent } from '../domain/events.js';
import type { JsonObject } from '../domain/ports/event-store.js';
import type { JobStreamLookup } from '../domain/ports/job-streams.js';
import { keyStream } from '../domain/streams.js';
import { Key, checkField } from '../domain/values.js';
import type { CommandResult, Loaded } from './key-writer.js';

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

/** Force-releases one holder (jobId) or every holder of the key: RevokeLease. */
export const release = async (deps: OperatorDeps, input: { readonly key: string; readonly jobId?: string; readonly by: string }, metadata?: JsonObject): Promise<{ released: string[] }> => {
  const key = checkField('key', Key, input.key);
  const command = checked<Command>({ type: 'RevokeLease', by: input.by, jitter: deps.random(), ...(input.jobId !== undefined ? { jobId: input.jobId } : {}) });
  const events = await run(deps, await existingKey(deps, key), command, metadata);
  return { released: jobIdsOf(events, 'LeaseRevoked') };
};

/** Drops some parked jobs (jobIds) or all of them: DiscardParked. */
export const discard = async (deps: OperatorDeps, input: { readonly key: string; readonly jobIds?: readonly string[]; readonly by: string }, metadata?: JsonObject): Promise<{ discarded: string[] }> => {
  const key = checkField('key', Key, input.key);
  const command = checked<Command>({ type: 'DiscardParked', by: input.by, ...(input.jobIds !== undefined ? { jobIds: input.jobIds as string[] } : {}) });
  const events = await run(deps, await existingKey(deps, key), command, metadata);
  return { discarded: jobIdsOf(events, 'ParkedDiscarded') };
};

/** Changes the key's limit: SetLimit. A raise promotes parked jobs at once; a lowered limit preempts no one. */
export const setLimit = async (deps: OperatorDeps, input: { readonly key: string; readonly limit: number; readonly by: string }, metadata?: JsonObject): Promise<{ limit: number; promoted: string[] }> => {
  const key = checkField('key', Key, input.key);
  const command = checked<Command>({ type: 'SetLimit', limit: input.limit, by: input.by });
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

/**
 * Cancels a scheduled, parked or running job: Cancel on the job's stream (found in jl_jobs). A job
 * already finished is not cancelled (false); a holder's slot goes to the next parked job.
 */
export const cancel = async (deps: OperatorDeps, input: { readonly jobId: string; readonly by: string }, metadata?: JsonObject): Promise<{ cancelled: boolean }> => {
  const command = checked<Command>({ type: 'Cancel', jobId: input.jobId, by: input.by });
  const stream = await deps.jobStream(input.jobId);
  if (stream === null) throw new UnknownJobError(input.jobId);
  const result = await deps.execute(stream, command, metadata);
  if (E.isRight(result)) return { cancelled: true };
  if (result.left.tag === 'JobNotFound') return { cancelled: false };
  throw new RefusedError(result.left);
};

import * as E from 'fp-ts/lib/Either.js';
import * as t from 'io-ts';
import type { Command } from '../domain/commands.js';
import { RefusedError, UnknownJobError, UnknownKeyError } from '../domain/errors.js';
import { endingOf } from '../domain/explain.js';
import type { KeyEvent } from '../domain/events.js';
import type { EventStore, JsonObject } from '../domain/ports/event-store.js';
import type { JobStreamLookup } from '../domain/ports/job-streams.js';
import { keyStream } from '../domain/streams.js';
import { Actor, JobId, Key, ValidationError, checkField } from '../domain/values.js';
import { readJobsOfStream } from './job-events.js';
import { keyHead } from './key-head.js';
import type { CommandResult, KeyCommand, Loaded } from './key-command.js';

// The operator's actions on dead jobs: retry (the job runs again, with a fresh set of attempts)
// and discard (off the failed list for good), each recorded on the job's home stream with who did
// it. Several jobs go in one transaction, all or nothing: every job is checked against the ledger
// first (known, and dead), so a refusal names the job and writes nothing.

export interface DeadJobDeps {
  readonly executeMany: (items: readonly KeyCommand[], options: { readonly atomic: boolean }) => Promise<CommandResult[]>;
  readonly load: (stream: string) => Promise<Loaded>;
  readonly store: EventStore;
  readonly jobStream: JobStreamLookup;
  /** The dead jobs of a key (from the jobs read model; each is checked against the ledger again). */
  readonly deadJobsOf: (key: string) => Promise<readonly string[]>;
}

/** The most jobs one retry or discard takes. */
export const MAX_DEAD_JOBS = 1_000;


/** Some dead jobs by id, or every dead job of a key. */
export type DeadJobsInput = ({ readonly jobIds: readonly string[]; readonly key?: undefined } | { readonly key: string; readonly jobIds?: undefined }) & { readonly by: string };

const targets = async (deps: DeadJobDeps, input: DeadJobsInput): Promise<readonly string[]> => {
  const { jobIds, key } = (typeof input === 'object' && input !== null ? input : {}) as { jobIds?: unknown; key?: unknown };
  if ((jobIds === undefined) === (key === undefined)) throw new ValidationError('jobIds', 'give jobIds or a key (every dead job of the key), one of them');
  if (jobIds !== undefined) {
    // Each id checked first, so a bad one is named (jobIds[2]).
    const ids = checkField('jobIds', t.array(JobId), jobIds);
    if (ids.length < 1 || ids.length > MAX_DEAD_JOBS) throw new ValidationError('jobIds', `must be 1 to ${MAX_DEAD_JOBS} job ids`);
    return [...new Set(ids)];
  }
  const k = checkField('key', Key, key);
  if ((await keyHead(deps, keyStream(k))) === 'no_stream') throw new UnknownKeyError(k);
  return deps.deadJobsOf(k);
};

/** Each job's command, once the ledger says it is dead: `make` builds it from the job's last arrival (JobEnqueued or JobRetried). */
const onDeadJobs = async (
  deps: DeadJobDeps,
  input: DeadJobsInput,
  metadata: JsonObject | undefined,
  make: (jobId: string, arrival: { readonly queue: string; readonly priority: number; readonly maxAttempts: number; readonly leaseMs: number; readonly limits?: readonly string[] | undefined }) => Command,
): Promise<{ readonly jobId: string; readonly events: readonly KeyEvent[] }[]> => {
  const jobIds = await targets(deps, input);
  checkField('by', Actor, input.by);
  const streams = await Promise.all(jobIds.map((jobId) => deps.jobStream(jobId)));
  // Each home is read once for all of its jobs, when the first of them is checked (in the order given, so the first at fault is named).
  const byStream = new Map<string, string[]>();
  streams.forEach((stream, i) => {
    if (stream === null) return;
    const ids = byStream.get(stream);
    if (ids === undefined) byStream.set(stream, [jobIds[i]!]);
    else ids.push(jobIds[i]!);
  });
  const reads = new Map<string, ReturnType<typeof readJobsOfStream>>();
  const items: KeyCommand[] = [];
  for (const [i, jobId] of jobIds.entries()) {
    const stream = streams[i]!;
    if (stream === null) throw new UnknownJobError(jobId);
    let read = reads.get(stream);
    if (read === undefined) reads.set(stream, (read = readJobsOfStream(deps.store, stream, byStream.get(stream)!)));
    const { home, jobs } = await read;
    const own = (jobs.get(jobId)?.events ?? []).filter((e) => e.stream === stream).map((e) => e.event);
    const held = home.state.jobs[jobId];
    const status = held === undefined ? endingOf(own).status : held.lease?.workerId != null ? 'running' : held.status;
    if (status !== 'dead') throw new RefusedError({ tag: 'NotDead', jobId, status }, stream);
    const arrival = [...own].reverse().find((e) => e.type === 'JobEnqueued' || e.type === 'JobRetried');
    if (arrival === undefined || (arrival.type !== 'JobEnqueued' && arrival.type !== 'JobRetried')) throw new UnknownJobError(jobId);
    items.push({ stream, command: make(jobId, arrival.data), ...(metadata ? { metadata } : {}) });
  }
  if (items.length === 0) return [];
  const results = await deps.executeMany(items, { atomic: true });
  return results.map((r, i) => ({ jobId: jobIds[i]!, events: E.isRight(r) ? r.right.events : [] }));
};

/** Where a retried job went: a free slot (in every key it is under), or the back of the line. */
export interface Retried {
  readonly jobId: string;
  readonly status: 'acquired' | 'parked';
}

/**
 * Dead jobs run again: each is admitted like an arrival (a free slot, or the back of the line;
 * across its further limits in the same decision), with a fresh set of attempts. Throws
 * ValidationError, UnknownKeyError, UnknownJobError, or RefusedError (NotDead) naming the job.
 */
export const retry = async (deps: DeadJobDeps, input: DeadJobsInput, metadata?: JsonObject): Promise<{ retried: Retried[] }> => {
  const done = await onDeadJobs(deps, input, metadata, (jobId, a) => ({
    type: 'RetryJob',
    jobId,
    by: input.by,
    job: { queue: a.queue, priority: a.priority, maxAttempts: a.maxAttempts, leaseMs: a.leaseMs, ...(a.limits !== undefined && a.limits.length > 0 ? { limits: [...a.limits] } : {}) },
  }));
  return { retried: done.map(({ jobId, events }) => ({ jobId, status: events.some((e) => e.type === 'SlotAcquired' && e.data.jobId === jobId) ? 'acquired' : 'parked' })) };
};

/** Dead jobs leave the failed list for good (DeadDiscarded on their stream). Throws as retry does. */
export const discardDead = async (deps: DeadJobDeps, input: DeadJobsInput, metadata?: JsonObject): Promise<{ discarded: string[] }> => ({
  discarded: (await onDeadJobs(deps, input, metadata, (jobId) => ({ type: 'DiscardDead', jobId, by: input.by }))).map((d) => d.jobId),
});

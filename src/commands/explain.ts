import * as t from 'io-ts';
import { UnknownJobError } from '../domain/errors.js';
import { explain, type Explanation } from '../domain/explain.js';
import type { EventStore } from '../domain/ports/event-store.js';
import type { JobStreamLookup } from '../domain/ports/job-streams.js';
import { JobId, checkField } from '../domain/values.js';
import { readJobStreams, type LineRead, type StreamLoad } from './job-events.js';
import type { ReadBudget } from './read-budget.js';

export interface ExplainDeps {
  readonly store: EventStore;
  readonly jobStream: JobStreamLookup;
  /** Epoch ms: the moment of an explanation of now. */
  readonly clock: () => number;
  /** The ids of the workers whose heartbeat is live now (an explanation of now names leases whose worker is gone). */
  readonly liveWorkers?: () => Promise<ReadonlySet<string>>;
  readonly budget?: ReadBudget;
  /** Each stream's state as it stands (snapshot and tail): with it, an explanation of now folds no stream whole. */
  readonly load?: StreamLoad;
  /** A limit key's line as the read models hold it: with it (and load), an explanation of now loads no limit key's state. */
  readonly line?: LineRead;
}

/** A moment: epoch ms (a number, or its digits as a query string gives them), an ISO-8601 time, or a Date. */
export const Instant = new t.Type<number, number, unknown>(
  'Instant',
  (u): u is number => typeof u === 'number',
  (u, c) => {
    const ms = u instanceof Date ? u.getTime() : typeof u === 'number' ? u : typeof u === 'string' && /^\d{1,15}$/.test(u) ? Number(u) : typeof u === 'string' && u.trim() !== '' ? Date.parse(u) : NaN;
    return Number.isSafeInteger(ms) && ms >= 0 ? t.success(ms) : t.failure(u, c, 'must be an ISO-8601 time or epoch milliseconds');
  },
  t.identity,
);

/**
 * Why the job is where it is (src/domain/explain.ts), now or as of a past moment `at`, from the
 * ledger: its streams folded up to that moment, and its events there. Throws ValidationError
 * naming the field, or UnknownJobError.
 */
export const explainJob = async (deps: ExplainDeps, input: { readonly jobId: string; readonly at?: number | string | Date }): Promise<Explanation> => {
  const jobId = checkField('jobId', JobId, input?.jobId);
  const at = input.at === undefined ? undefined : checkField('at', Instant, input.at);
  const stream = await deps.jobStream(jobId);
  if (stream === null) throw new UnknownJobError(jobId);
  const asOf = at ?? deps.clock();
  const [{ home, limits, events }, liveWorkers] = await Promise.all([readJobStreams(deps.store, stream, jobId, at, deps.budget, deps.load, deps.line), at === undefined ? deps.liveWorkers?.() : undefined]);
  return explain({ jobId, asOf, home, limits, events, ...(liveWorkers === undefined ? {} : { liveWorkers }) });
};

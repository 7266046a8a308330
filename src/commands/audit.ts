import { auditKeyOf, describeEvents, handoffsOf, type Handoff, type RevisionedEvent } from '../domain/audit.js';
import { UnknownJobError, UnknownKeyError } from '../domain/errors.js';
import type { EventStore, RecordedEvent } from '../domain/ports/event-store.js';
import type { JobStreamLookup } from '../domain/ports/job-streams.js';
import { keyStream } from '../domain/streams.js';
import { Key, NonEmptyString, ValidationError, checkField } from '../domain/values.js';
import { decodeRecorded } from '../domain/recorded.js';
import { readJobStreams, readStreamWhole } from './job-events.js';

export type AuditTarget = { readonly key: string } | { readonly jobId: string };

export interface AuditEvent {
  readonly stream: string;
  readonly revision: number;
  readonly type: string;
  /** As recorded in the ledger. */
  readonly data: object;
}

export interface Audit {
  /** One row per slot tenure, oldest admission first: on a limit key, its guests' too (Handoff.home). */
  readonly handoffs: Handoff[];
  /** The events they were folded from, in stream order; for a job, on its home and its limit keys, in global order. */
  readonly events: AuditEvent[];
  /** Each of `events` in words, at the same index (a guest named with its home: "job j1 of key a"). */
  readonly eventsInWords: string[];
}

export interface AuditDeps {
  readonly store: EventStore;
  readonly jobStream: JobStreamLookup;
}

const JobId = NonEmptyString(200);

/**
 * Every slot handoff of a key, or of one job, read from the ledger itself (not the read models:
 * the audit must hold even if they are wrong). A job is found through jl_jobs only to learn its
 * stream; its audit has its tenures at home and as a guest of its limit keys. Throws ValidationError naming the field, UnknownKeyError or UnknownJobError.
 */
export const audit = async (deps: AuditDeps, target: AuditTarget): Promise<Audit> => {
  // An absent field and an undefined one are the same (a query string's missing parameter).
  const { key: givenKey, jobId: givenJobId } = (typeof target === 'object' && target !== null ? target : {}) as { key?: unknown; jobId?: unknown };
  if (givenKey !== undefined && givenJobId !== undefined) throw new ValidationError('jobId', 'give a key or a jobId, not both');
  if (givenJobId === undefined) {
    const key = checkField('key', Key, givenKey);
    const recorded = await readStreamWhole(deps.store, keyStream(key));
    if (recorded.length === 0) throw new UnknownKeyError(key);
    return auditOf(recorded);
  }
  const jobId = checkField('jobId', JobId, givenJobId);
  const stream = await deps.jobStream(jobId);
  if (stream === null) throw new UnknownJobError(jobId);
  const { home, limits, events } = await readJobStreams(deps.store, stream, jobId);
  // Its tenures at home, then as a guest of each limit key (its slots there, under the same leases).
  const handoffs = [home, ...limits].flatMap((s) =>
    handoffsOf(auditKeyOf(s.stream), events.filter((e) => e.stream === s.stream).map((e) => ({ revision: e.revision, event: e.event }))),
  );
  return {
    handoffs,
    events: events.map((e) => ({ stream: e.stream, revision: e.revision, type: e.event.type, data: e.data })),
    eventsInWords: describeEvents(events.map((e) => e.event)),
  };
};

/** One event of a job's history: where, when, who and why, and in words. */
export interface HistoryEvent {
  readonly stream: string;
  readonly revision: number;
  readonly type: string;
  /** Decision time (epoch ms). */
  readonly at: number;
  /** Who: the operator the event names (revoked, cancelled, retried … by), else the metadata's `by`; null for the system's own decisions. */
  readonly by: string | null;
  /** Where the command came from (metadata `via`: cli, http, …). */
  readonly via: string | null;
  /** The worker whose command it was (metadata `workerId`). */
  readonly workerId: string | null;
  /** Why: the event's reason or error, when it has one. */
  readonly why: string | null;
  readonly inWords: string;
  /** As recorded. */
  readonly data: object;
}

export interface JobHistory {
  readonly jobId: string;
  /** Its home key (the stream's name for a job without a key). */
  readonly key: string;
  readonly stream: string;
  /** Every event of the job on its home and its limit keys, in the ledger's global order. */
  readonly events: HistoryEvent[];
}

const text = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/** A job's own view: its events across every stream it appears on, with who and why. Throws as audit does. */
export const jobHistory = async (deps: AuditDeps, input: { readonly jobId: string }): Promise<JobHistory> => {
  const jobId = checkField('jobId', JobId, input?.jobId);
  const stream = await deps.jobStream(jobId);
  if (stream === null) throw new UnknownJobError(jobId);
  const { events } = await readJobStreams(deps.store, stream, jobId);
  const words = describeEvents(events.map((e) => e.event));
  return {
    jobId,
    key: auditKeyOf(stream),
    stream,
    events: events.map((e, i) => {
      const d = e.event.data as Record<string, unknown>;
      return {
        stream: e.stream,
        revision: e.revision,
        type: e.event.type,
        at: e.event.data.at,
        by: text(d.by) ?? text(e.metadata.by),
        via: text(e.metadata.via),
        workerId: text(d.workerId) ?? text(e.metadata.workerId),
        why: text(d.error) ?? text(d.reason),
        inWords: words[i]!,
        data: e.data,
      };
    }),
  };
};

const auditOf = (recorded: readonly RecordedEvent[]): Audit => {
  // A job without a key has a stream of its own: its name stands in for the key.
  const key = auditKeyOf(recorded[0]?.stream ?? '');
  const decoded: RevisionedEvent[] = recorded.map((r) => ({ revision: r.revision, event: decodeRecorded(r) }));
  return {
    handoffs: handoffsOf(key, decoded),
    events: recorded.map((r) => ({ stream: r.stream, revision: r.revision, type: r.type, data: r.data })),
    eventsInWords: describeEvents(decoded.map((d) => d.event)),
  };
};

import { auditKeyOf, describeEvents, handoffsOf, type Handoff, type RevisionedEvent } from '../domain/audit.js';
import { UnknownJobError, UnknownKeyError } from '../domain/errors.js';
import type { EventStore, RecordedEvent } from '../domain/ports/event-store.js';
import type { JobStreamLookup } from '../domain/ports/job-streams.js';
import { keyStream } from '../domain/streams.js';
import { Key, NonEmptyString, ValidationError, checkField } from '../domain/values.js';
import { decodeRecorded } from '../domain/recorded.js';

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
  /** The events they were folded from, in stream order. */
  readonly events: AuditEvent[];
  /** Each of `events` in words, at the same index (a guest named with its home: "job j1 of key a"). */
  readonly eventsInWords: string[];
}

export interface AuditDeps {
  readonly store: EventStore;
  readonly jobStream: JobStreamLookup;
}

const PAGE = 1_000;

const JobId = NonEmptyString(200);

/**
 * Every slot handoff of a key, or of one job, read from the ledger itself (not the read models:
 * the audit must hold even if they are wrong). A job is found through jl_jobs only to learn its
 * stream. Throws ValidationError naming the field, UnknownKeyError or UnknownJobError.
 */
export const audit = async (deps: AuditDeps, target: AuditTarget): Promise<Audit> => {
  // An absent field and an undefined one are the same (a query string's missing parameter).
  const { key: givenKey, jobId: givenJobId } = (typeof target === 'object' && target !== null ? target : {}) as { key?: unknown; jobId?: unknown };
  if (givenKey !== undefined && givenJobId !== undefined) throw new ValidationError('jobId', 'give a key or a jobId, not both');
  if (givenJobId === undefined) {
    const key = checkField('key', Key, givenKey);
    const recorded = await readAll(deps.store, keyStream(key));
    if (recorded.length === 0) throw new UnknownKeyError(key);
    return auditOf(recorded);
  }
  const jobId = checkField('jobId', JobId, givenJobId);
  const stream = await deps.jobStream(jobId);
  if (stream === null) throw new UnknownJobError(jobId);
  const all = auditOf(await readAll(deps.store, stream));
  const mine = all.events.map((e) => (e.data as { jobId?: unknown }).jobId === jobId);
  return {
    handoffs: all.handoffs.filter((h) => h.jobId === jobId),
    events: all.events.filter((_, i) => mine[i]),
    eventsInWords: all.eventsInWords.filter((_, i) => mine[i]),
  };
};

const readAll = async (store: EventStore, stream: string): Promise<RecordedEvent[]> => {
  const out: RecordedEvent[] = [];
  for (let from = 0; ; from += PAGE) {
    const page = await store.readStream(stream, { fromRevision: from, maxCount: PAGE });
    out.push(...page);
    if (page.length < PAGE) return out;
  }
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

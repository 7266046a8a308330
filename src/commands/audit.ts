import { auditKeyOf, describeEvents, handoffsOf, renewalsInWords, type Handoff, type RevisionedEvent } from '../domain/audit.js';
import { UnknownJobError, UnknownKeyError } from '../domain/errors.js';
import * as t from 'io-ts';
import type { RecordedEvent } from '../domain/ports/event-store.js';
import type { JobStreamLookup } from '../domain/ports/job-streams.js';
import { keyStream } from '../domain/streams.js';
import { Key, NonEmptyString, ValidationError, checkField, refine } from '../domain/values.js';
import { decodeRecorded } from '../domain/recorded.js';
import { AUDIT_PAGE, MAX_AUDIT_PAGE } from './audit-page.js';
import { eachPage, foldRenewals, foldedJobEvents, jobEventsOf, limitsOf, type FoldedJobEvent } from './job-events.js';
import { keyHead, type KeyHeadDeps } from './key-head.js';
import type { ReadBudget } from './read-budget.js';

/**
 * A key's audit is read a page at a time, newest first: the events before revision `before` (the
 * head's next when absent), `limit` of them at most (AUDIT_PAGE when absent). One job's is whole.
 */
export type AuditTarget = { readonly key: string; readonly before?: number; readonly limit?: number } | { readonly jobId: string };


/** Where a key's audit page sits in its stream. */
export interface AuditPage {
  /** The revisions of its events: [from, to]. */
  readonly from: number;
  readonly to: number;
  /** The stream's newest revision when it was read. */
  readonly head: number;
  /** The `before` of the page of older events; null on the first page. */
  readonly older: number | null;
}

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
  /** A key's page: its handoffs are those admitted in it, each followed to its release. */
  readonly page?: AuditPage;
}

export interface AuditDeps extends KeyHeadDeps {
  readonly jobStream: JobStreamLookup;
  readonly budget?: ReadBudget;
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
    const { before, limit } = target as { before?: unknown; limit?: unknown };
    return auditPage(deps, key, before === undefined ? undefined : checkField('before', Revision, before), limit === undefined ? AUDIT_PAGE : checkField('limit', PageSize, limit));
  }
  const jobId = checkField('jobId', JobId, givenJobId);
  const stream = await deps.jobStream(jobId);
  if (stream === null) throw new UnknownJobError(jobId);
  const events = await jobEventsOf(deps.store, stream, jobId, deps.budget);
  // Its tenures at home, then as a guest of each limit key (its slots there, under the same leases).
  const streams = [stream, ...limitsOf(events).map(keyStream)];
  const handoffs = streams.flatMap((s) =>
    handoffsOf(auditKeyOf(s), events.filter((e) => e.stream === s).map((e) => ({ revision: e.revision, event: e.event }))),
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
  /** As recorded (of a folded run of renewals: its last). */
  readonly data: object;
  /** A run of renewals of one lease folded into this, its last (history with renewals 'folded'): how many, and the first's time and revision. */
  readonly renewals?: { readonly count: number; readonly firstAt: number; readonly firstRevision: number };
}

export interface JobHistory {
  readonly jobId: string;
  /** Its home key (the stream's name for a job without a key). */
  readonly key: string;
  readonly stream: string;
  /** Whether runs of renewals are folded (HistoryEvent.renewals) or each given. */
  readonly renewals: 'folded' | 'all';
  /** Every event of the job on its home and its limit keys, in the ledger's global order. */
  readonly events: HistoryEvent[];
}

const text = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/** `renewals`: 'folded' (the default) gives each run of renewals of one lease as one event, its last; 'all' gives each. */
export interface JobHistoryInput {
  readonly jobId: string;
  readonly renewals?: 'folded' | 'all';
}

const Renewals = t.union([t.literal('folded'), t.literal('all')]);

/**
 * A job's own view: its events across every stream it appears on, with who and why. A job that
 * ran for an hour renewed its lease 360 times: folded, those are one line that says so. Throws as audit does.
 */
export const jobHistory = async (deps: AuditDeps, input: JobHistoryInput): Promise<JobHistory> => {
  const jobId = checkField('jobId', JobId, input?.jobId);
  const renewals = input.renewals === undefined ? 'folded' : checkField('renewals', Renewals, input.renewals);
  const stream = await deps.jobStream(jobId);
  if (stream === null) throw new UnknownJobError(jobId);
  // Folded: a run of renewals of one lease is its last event, with the run's count; only the events
  // kept are put in words (a job renewed 5,000 times has 5,000 renewals and a handful of lines),
  // and where the store counts renewals, only those are read.
  const kept: readonly FoldedJobEvent[] =
    renewals === 'all'
      ? (await jobEventsOf(deps.store, stream, jobId, deps.budget)).map((e) => ({ e }))
      : ((await foldedJobEvents(deps.store, stream, jobId, deps.budget)) ?? foldRenewals(await jobEventsOf(deps.store, stream, jobId, deps.budget)));
  const words = describeEvents(kept.map(({ e }) => e.event));
  const out: HistoryEvent[] = kept.map(({ e, run }, i) => {
    const d = e.event.data as Record<string, unknown>;
    const entry: HistoryEvent = {
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
    if (run === undefined || e.event.type !== 'LeaseRenewed') return entry;
    return { ...entry, renewals: run, inWords: renewalsInWords(e.event.data.leaseId, run.count, run.firstAt, entry.at, e.event.data.expiresAt) };
  });
  return { jobId, key: auditKeyOf(stream), stream, renewals, events: out };
};

const Revision = refine(t.number, 'Revision', (n) => Number.isSafeInteger(n) && n >= 0, 'must be a stream revision: a whole number, 0 or more');
const PageSize = refine(t.number, 'PageSize', (n) => Number.isSafeInteger(n) && n >= 1 && n <= MAX_AUDIT_PAGE, `must be a whole number from 1 to ${MAX_AUDIT_PAGE}`);

/**
 * One page of a key's audit: its events in [before - limit, before), and the handoffs admitted
 * there, read on past the page until each is released (or the stream ends), so that a tenure is
 * never cut in two. What costs is the page, not the stream.
 */
const auditPage = async (deps: AuditDeps, key: string, before: number | undefined, limit: number): Promise<Audit> => {
  const stream = keyStream(key);
  const head = await keyHead(deps, stream);
  if (head === 'no_stream') throw new UnknownKeyError(key);
  const to = Math.min(before ?? head + 1, head + 1) - 1;
  const from = Math.max(0, to + 1 - limit);
  const decoded: RevisionedEvent[] = [];
  const inPage: RecordedEvent[] = [];
  // The jobs holding a slot opened in the page and not released yet: reading goes on past it while there are any.
  const heldBy = new Set<string>();
  const opens = new Set(['SlotAcquired', 'JobPromoted', 'LimitHeld']);
  const closes = new Set(['SlotReleased', 'LimitReleased']);
  await eachPage(
    deps.store,
    stream,
    (page) => {
      for (const r of page) {
        if (r.revision > to && heldBy.size === 0) return false;
        const event = decodeRecorded(r);
        decoded.push({ revision: r.revision, event });
        if (r.revision <= to) inPage.push(r);
        const jobId = 'jobId' in event.data ? event.data.jobId : undefined;
        if (jobId === undefined) continue;
        if (opens.has(event.type) && r.revision <= to) heldBy.add(jobId);
        else if (closes.has(event.type)) heldBy.delete(jobId);
      }
      return true;
    },
    { from, budget: deps.budget },
  );
  const handoffs = handoffsOf(key, decoded).filter((h) => h.acquiredRevision >= from && h.acquiredRevision <= to);
  return {
    handoffs,
    events: inPage.map((r) => ({ stream: r.stream, revision: r.revision, type: r.type, data: r.data })),
    eventsInWords: describeEvents(decoded.slice(0, inPage.length).map((d) => d.event)),
    page: { from, to, head, older: from > 0 ? from : null },
  };
};

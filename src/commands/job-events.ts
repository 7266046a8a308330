import type { KeyEvent } from '../domain/events.js';
import type { LimitLine } from '../domain/explain.js';
import { apply, draftOf, holders, initialKeyState, type KeyState } from '../domain/key-state.js';
import { comparePositions, type EventStore, type GlobalPosition, type JsonObject, type RecordedEvent, type StreamRevision } from '../domain/ports/event-store.js';
import { decodeRecorded } from '../domain/recorded.js';
import { keyStream } from '../domain/streams.js';
import { checkBudget, type ReadBudget } from './read-budget.js';

// Jobs' events across every stream they appear on (their home, and the limit keys they are guests
// of), with the states of those streams: what a job's audit, its history, a retry and "why is it
// waiting?" are read from. The ledger itself, never the read models: a job is found through
// jl_jobs only to learn its home stream.
//
// A stream is read a page at a time and each page folded into ONE state changed in place as it
// arrives: a fold that copied the state at each event (fold(state, [event])) cost O(jobs) per
// event, ~1.8 ms an event on a key with 3,000 unfinished jobs; and a page folded between two reads
// keeps the event loop free for the rest of the process (serve's sweeper and API).

const PAGE = 1_000;

/**
 * Reads a stream from `from` a page at a time, handing each page to `each` as it arrives; stops
 * when `each` returns false or the stream ends. Throws ReadBudgetError past the budget.
 */
export const eachPage = async (
  store: EventStore,
  stream: string,
  each: (page: readonly RecordedEvent[]) => boolean | void,
  { from = 0, budget }: { readonly from?: number; readonly budget?: ReadBudget | undefined } = {},
): Promise<void> => {
  for (let at = from; ; at += PAGE) {
    checkBudget(budget);
    const page = await store.readStream(stream, { fromRevision: at, maxCount: PAGE });
    if (each(page) === false || page.length < PAGE) return;
  }
};

/** An event of the job, where it was recorded. */
export interface JobEvent {
  readonly stream: string;
  readonly revision: StreamRevision;
  readonly position: GlobalPosition;
  readonly event: KeyEvent;
  /** The event's data as recorded (event is it decoded, upcast from an older schema). */
  readonly data: JsonObject;
  /** As recorded: who asked (`by`), from where (`via`), the worker. */
  readonly metadata: JsonObject;
  /** For a JobParked or LimitWaiting: how the stream's key stood just before (why the job waited there). */
  readonly line?: { readonly limit: number; readonly holding: number; readonly paused: boolean };
}

/** A stream folded up to the moment asked for. */
export interface StreamAt {
  readonly stream: string;
  readonly state: KeyState;
  readonly revision: StreamRevision | 'no_stream';
  /** When each lease of the state's holders was started (JobStarted), by lease id. */
  readonly startedAt: ReadonlyMap<string, number>;
}

export interface JobStreams {
  readonly home: StreamAt;
  /** The limit keys the job is under (its JobEnqueued's, or its last JobRetried's), in that order. */
  readonly limits: readonly StreamAt[];
  /** The job's events on all of them, in global order. */
  readonly events: readonly JobEvent[];
}

const jobIdOf = (event: KeyEvent): string | undefined => ('jobId' in event.data ? event.data.jobId : undefined);

/** One stream folded in place, keeping the events of some jobs: up to `until` (all when absent). */
const foldStream = async (store: EventStore, stream: string, jobIds: ReadonlySet<string>, until: number | undefined, budget: ReadBudget | undefined): Promise<{ at: StreamAt; events: Map<string, JobEvent[]> }> => {
  const state = draftOf(initialKeyState);
  let revision: StreamRevision | 'no_stream' = 'no_stream';
  const startedAt = new Map<string, number>();
  const events = new Map<string, JobEvent[]>();
  await eachPage(
    store,
    stream,
    (page) => {
      for (const r of page) {
        const event = decodeRecorded(r);
        // Time is the stream's order of decisions: folding stops at the first event decided later.
        if (until !== undefined && event.data.at > until) return false;
        const jobId = jobIdOf(event);
        if (jobId !== undefined && jobIds.has(jobId)) {
          const waits = event.type === 'JobParked' || event.type === 'LimitWaiting';
          let own = events.get(jobId);
          if (own === undefined) events.set(jobId, (own = []));
          own.push({ stream, revision: r.revision, position: r.position, event, data: r.data, metadata: r.metadata, ...(waits ? { line: { limit: state.limit, holding: state.holding, paused: state.paused !== undefined } } : {}) });
        }
        if (event.type === 'JobStarted') startedAt.set(event.data.leaseId, event.data.at);
        apply(state, event);
        revision = r.revision;
      }
      return true;
    },
    { budget },
  );
  return { at: { stream, state, revision, startedAt }, events };
};

/** The limit keys of the job's last arrival (JobEnqueued, or JobRetried) among its events. */
export const limitsOf = (events: readonly JobEvent[]): readonly string[] => {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!.event;
    if (e.type === 'JobEnqueued' || e.type === 'JobRetried') return e.data.limits ?? [];
  }
  return [];
};

/**
 * Some jobs of one home stream, each with its streams and events, as of `until` (epoch ms; now
 * when absent): the home and each limit key is read and folded once for all of them (a retry of
 * every dead job of a key reads the key once). A job with no event there is absent.
 */
export const readJobsOfStream = async (store: EventStore, home: string, jobIds: readonly string[], until?: number, budget?: ReadBudget): Promise<{ home: StreamAt; jobs: Map<string, JobStreams> }> => {
  const wanted = new Set(jobIds);
  const own = await foldStream(store, home, wanted, until, budget);
  const limitKeys = [...new Set([...own.events.values()].flatMap(limitsOf))];
  const limits = new Map(await Promise.all(limitKeys.map(async (key) => [key, await foldStream(store, keyStream(key), wanted, until, budget)] as const)));
  const out = new Map<string, JobStreams>();
  for (const [jobId, homeEvents] of own.events) {
    const under = limitsOf(homeEvents).map((key) => limits.get(key)!);
    const events = [...homeEvents, ...under.flatMap((l) => l.events.get(jobId) ?? [])].sort((a, b) => comparePositions(a.position, b.position));
    out.set(jobId, { home: own.at, limits: under.map((l) => l.at), events });
  }
  return { home: own.at, jobs: out };
};

/**
 * One job's streams and events, as of `until` (epoch ms; now when absent). Now, with `load` and a
 * store that finds a job's events by its id, nothing is folded but what follows each snapshot
 * (and a limit key that `line` answers for is not loaded at all).
 */
export const readJobStreams = async (store: EventStore, home: string, jobId: string, until?: number, budget?: ReadBudget, load?: StreamLoad, line?: LineRead): Promise<JobStreamsNow> => {
  if (until === undefined && load !== undefined && store.readJobEvents !== undefined) {
    checkBudget(budget);
    const now = await readJobStreamsNow(store as Required<Pick<EventStore, 'readJobEvents'>>, load, home, jobId, line);
    if (now !== undefined) return now;
  }
  const { home: at, jobs } = await readJobsOfStream(store, home, [jobId], until, budget);
  // No event of the job (yet, as of `until`): the home as it stands, and no limits.
  return jobs.get(jobId) ?? { home: at, limits: [], events: [] };
};

const jobEventOf = (r: RecordedEvent): JobEvent => ({ stream: r.stream, revision: r.revision, position: r.position, event: decodeRecorded(r), data: r.data, metadata: r.metadata });

/**
 * One job's events on its home and on the limit keys of its last arrival, in global order, as
 * its history and its audit show them: found by the store's index on job ids when it has one
 * (the cost is the job's events, not its streams'), else by folding its streams.
 */
export const jobEventsOf = async (store: EventStore, home: string, jobId: string, budget?: ReadBudget): Promise<readonly JobEvent[]> => {
  if (store.readJobEvents === undefined) return (await readJobStreams(store, home, jobId, undefined, budget)).events;
  checkBudget(budget);
  return (await indexedJobEvents(store as Required<Pick<EventStore, 'readJobEvents'>>, home, jobId)).events;
};

/** The job's events on its home, then on the limit keys of its last arrival, found by the store's index, in global order. */
const indexedJobEvents = async (store: Required<Pick<EventStore, 'readJobEvents'>>, home: string, jobId: string, except: readonly string[] = []): Promise<{ events: JobEvent[]; limits: readonly string[] }> => {
  const own = (await store.readJobEvents([jobId], [home], { except })).map(jobEventOf);
  const limits = limitsOf(own);
  const guest = limits.length === 0 ? [] : (await store.readJobEvents([jobId], limits.map(keyStream), { except })).map(jobEventOf);
  return { events: [...own, ...guest].sort((a, b) => comparePositions(a.position, b.position)), limits };
};

/** What an explanation of now reads without: a job renewed its lease every 10 s of an hour has 360 renewals and a handful of other events. */
const RENEWALS: readonly string[] = ['LeaseRenewed'];

/** A run of renewals of one lease, folded into its last renewal: how many, and the first's time and revision. */
export interface RenewalFold {
  readonly count: number;
  readonly firstAt: number;
  readonly firstRevision: number;
}

/** A job's event as its history lists it: a run of renewals is its last renewal, with the run (when it holds more than one). */
export interface FoldedJobEvent {
  readonly e: JobEvent;
  readonly run?: RenewalFold;
}

/** The job's events with each run of renewals of one lease (consecutive among the job's events, on one stream) folded into its last. */
export const foldRenewals = (events: readonly JobEvent[]): FoldedJobEvent[] => {
  const kept: FoldedJobEvent[] = [];
  let run: { count: number; firstAt: number; firstRevision: number } | undefined;
  events.forEach((e, i) => {
    if (e.event.type !== 'LeaseRenewed') return void kept.push({ e });
    run ??= { count: 0, firstAt: e.event.data.at, firstRevision: e.revision };
    run.count++;
    const after = events[i + 1];
    if (after?.event.type === 'LeaseRenewed' && after.stream === e.stream && after.event.data.leaseId === e.event.data.leaseId) return;
    kept.push(run.count > 1 ? { e, run } : { e });
    run = undefined;
  });
  return kept;
};

/**
 * foldRenewals of the job's events, the renewals counted by the store instead of read
 * (readJobRenewals): only each run's first and last are read. Undefined when the store cannot
 * count them, or when an event of the job falls inside a run (foldRenewals would cut it there,
 * which only reading the run tells): the caller reads every event then. Test: "a history folded
 * from counted renewals is the one folded from every renewal".
 */
export const foldedJobEvents = async (store: EventStore, home: string, jobId: string, budget?: ReadBudget): Promise<FoldedJobEvent[] | undefined> => {
  if (store.readJobEvents === undefined || store.readJobRenewals === undefined) return undefined;
  checkBudget(budget);
  const { events, limits } = await indexedJobEvents(store as Required<Pick<EventStore, 'readJobEvents'>>, home, jobId, RENEWALS);
  const runs = await store.readJobRenewals(jobId, [home, ...limits.map(keyStream)]);
  const at = async (stream: string, revision: number) => jobEventOf((await store.readStream(stream, { fromRevision: revision, maxCount: 1 }))[0]!);
  const ends = await Promise.all(runs.map(async (run) => ({ run, first: await at(run.stream, run.firstRevision), last: await at(run.stream, run.lastRevision) })));
  const inside = (e: JobEvent, { first, last }: (typeof ends)[number]) => comparePositions(e.position, first.position) > 0 && comparePositions(e.position, last.position) < 0;
  for (const end of ends) if (events.some((e) => inside(e, end)) || ends.some((other) => other !== end && inside(other.first, end))) return undefined;
  const folded: FoldedJobEvent[] = [
    ...events.map((e) => ({ e })),
    ...ends.map(({ run, first, last }) => (run.count > 1 ? { e: last, run: { count: run.count, firstAt: first.event.data.at, firstRevision: first.revision } } : { e: last })),
  ];
  return folded.sort((a, b) => comparePositions(a.e.position, b.e.position));
};

/** A stream's state as it stands: its latest snapshot and the events after it (the key writer's load). */
export type StreamLoad = (stream: string) => Promise<{ readonly state: KeyState; readonly revision: StreamRevision | 'no_stream' }>;

/**
 * A limit key's line as its read models hold it now, for an explanation of `jobId`, without its
 * state (LimitLine, but for startedAt: readJobStreamsNow finds the starts). Given only where the
 * read models are written with the ledger (inline projections); undefined for a key they do not
 * hold or hold back (a quarantine): the key's state is loaded then.
 */
export type LineRead = (stream: string, jobId: string) => Promise<Omit<LimitLine, 'startedAt'> | undefined>;

/** The job's streams now: its home's state, and each limit key's state or its line as read. */
export interface JobStreamsNow {
  readonly home: StreamAt;
  readonly limits: readonly (StreamAt | LimitLine)[];
  readonly events: readonly JobEvent[];
}

const waitsIn = (event: KeyEvent): event is Extract<KeyEvent, { type: 'JobParked' | 'LimitWaiting' }> => event.type === 'JobParked' || event.type === 'LimitWaiting';

/** When each holder's lease started: its JobStarted, at its home (for a guest too), found by the store's index. */
const startsOf = async (store: Required<Pick<EventStore, 'readJobEvents'>>, stream: string, held: readonly { readonly jobId: string; readonly home?: string | undefined; readonly lease: { readonly leaseId: string } }[]): Promise<Map<string, number>> => {
  const startedAt = new Map<string, number>();
  if (held.length === 0) return startedAt;
  const started = await store.readJobEvents(held.map((h) => h.jobId), [...new Set(held.map((h) => h.home ?? stream))], { except: RENEWALS });
  const leases = new Set(held.map((h) => h.lease.leaseId));
  for (const r of started) {
    const e = decodeRecorded(r);
    if (e.type === 'JobStarted' && leases.has(e.data.leaseId)) startedAt.set(e.data.leaseId, e.data.at);
  }
  return startedAt;
};

/**
 * The job's streams now without folding them: each stream's state from `load` (each limit key's
 * line from `line`, when it answers), the job's events and its holders' starts found by the
 * store's index, each wait's line from its event. Undefined when a wait of the job was recorded
 * before waits recorded their line: its streams are folded.
 */
const readJobStreamsNow = async (store: Required<Pick<EventStore, 'readJobEvents'>>, load: StreamLoad, home: string, jobId: string, line?: LineRead): Promise<JobStreamsNow | undefined> => {
  // Where the job is and how it waited: its lease's renewals tell neither (the lease is in the state).
  const { events, limits } = await indexedJobEvents(store, home, jobId, RENEWALS);
  if (events.some((e) => waitsIn(e.event) && e.event.data.line === undefined)) return undefined;
  const loaded = async (stream: string): Promise<StreamAt> => {
    const { state, revision } = await load(stream);
    return { stream, state, revision, startedAt: await startsOf(store, stream, holders(state).map((h) => ({ ...h, lease: h.lease! }))) };
  };
  const read = async (stream: string): Promise<StreamAt | LimitLine> => {
    const l = await line?.(stream, jobId);
    return l === undefined ? loaded(stream) : { ...l, startedAt: await startsOf(store, stream, l.holders) };
  };
  const [own, ...under] = await Promise.all([loaded(home), ...limits.map((key) => read(keyStream(key)))]);
  return { home: own!, limits: under, events: events.map((e) => (waitsIn(e.event) ? { ...e, line: e.event.data.line! } : e)) };
};

import type { KeyEvent } from '../domain/events.js';
import { fold, initialKeyState, type KeyState } from '../domain/key-state.js';
import { comparePositions, type EventStore, type GlobalPosition, type JsonObject, type RecordedEvent, type StreamRevision } from '../domain/ports/event-store.js';
import { decodeRecorded } from '../domain/recorded.js';
import { keyStream } from '../domain/streams.js';

// One job's events across every stream it appears on (its home, and the limit keys it is a guest
// of), with the states of those streams: what the job's audit, its history, a retry and "why is
// it waiting?" are read from. The ledger itself, never the read models: a job is found through
// jl_jobs only to learn its home stream. No index finds a job's events, so each of its streams is
// read whole (as the key audit reads its key's).

const PAGE = 1_000;

/** Every event of a stream, in revision order. */
export const readStreamWhole = async (store: EventStore, stream: string): Promise<RecordedEvent[]> => {
  const out: RecordedEvent[] = [];
  for (let from = 0; ; from += PAGE) {
    const page = await store.readStream(stream, { fromRevision: from, maxCount: PAGE });
    out.push(...page);
    if (page.length < PAGE) return out;
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

/** Folds a stream's events decided at or before `until` (all when absent), keeping the job's. */
const foldFor = (stream: string, recorded: readonly RecordedEvent[], jobId: string, until: number | undefined): { at: StreamAt; events: JobEvent[] } => {
  let state = initialKeyState;
  let revision: StreamRevision | 'no_stream' = 'no_stream';
  const startedAt = new Map<string, number>();
  const events: JobEvent[] = [];
  for (const r of recorded) {
    const event = decodeRecorded(r);
    // Time is the stream's order of decisions: folding stops at the first event decided later.
    if (until !== undefined && event.data.at > until) break;
    if (jobIdOf(event) === jobId) {
      const waits = event.type === 'JobParked' || event.type === 'LimitWaiting';
      events.push({ stream, revision: r.revision, position: r.position, event, data: r.data, metadata: r.metadata, ...(waits ? { line: { limit: state.limit, holding: state.holding, paused: state.paused !== undefined } } : {}) });
    }
    if (event.type === 'JobStarted') startedAt.set(event.data.leaseId, event.data.at);
    state = fold(state, [event]);
    revision = r.revision;
  }
  return { at: { stream, state, revision, startedAt }, events };
};

/** The limit keys of the job's last arrival (JobEnqueued, or JobRetried) among its events. */
const limitsOf = (events: readonly JobEvent[]): readonly string[] => {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!.event;
    if (e.type === 'JobEnqueued' || e.type === 'JobRetried') return e.data.limits ?? [];
  }
  return [];
};

/**
 * The job's streams and events, as of `until` (epoch ms; now when absent). `cache`: streams read
 * already in this call (a retry of many jobs of one key reads the key once).
 */
export const readJobStreams = async (store: EventStore, home: string, jobId: string, until?: number, cache = new Map<string, readonly RecordedEvent[]>()): Promise<JobStreams> => {
  const read = async (stream: string) => {
    let recorded = cache.get(stream);
    if (recorded === undefined) cache.set(stream, (recorded = await readStreamWhole(store, stream)));
    return recorded;
  };
  const own = foldFor(home, await read(home), jobId, until);
  const limits = await Promise.all(limitsOf(own.events).map(async (key) => foldFor(keyStream(key), await read(keyStream(key)), jobId, until)));
  const events = [...own.events, ...limits.flatMap((l) => l.events)].sort((a, b) => comparePositions(a.position, b.position));
  return { home: own.at, limits: limits.map((l) => l.at), events };
};

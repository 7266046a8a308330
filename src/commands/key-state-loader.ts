import * as E from 'fp-ts/lib/Either.js';
import { PathReporter } from 'io-ts/lib/PathReporter.js';
import { KeyEvent } from '../domain/events.js';
import { KeyStateCodec, apply, draftOf, initialKeyState, type Draft, type KeyState } from '../domain/key-state.js';
import type { EventStore, RecordedEvent, SnapshotStore, StreamRevision } from '../domain/ports/event-store.js';
import type { Logger } from '../domain/ports/logger.js';

/** Bump when KeyState's shape or meaning changes: snapshots of another version are ignored and the stream is folded instead. */
export const KEY_STATE_SCHEMA_VERSION = 2;

export interface Loaded {
  readonly state: KeyState;
  readonly revision: StreamRevision | 'no_stream';
}

/** An event in the store does not decode: loading fails rather than silently skip it. */
export class EventDecodeError extends Error {
  override readonly name = 'EventDecodeError';
  constructor(
    readonly stream: string,
    readonly revision: StreamRevision,
    readonly problems: readonly string[],
  ) {
    super(`event at ${JSON.stringify(stream)} revision ${revision} does not decode: ${problems.join('; ')}`);
  }
}

export const decodeRecorded = (e: RecordedEvent): KeyEvent => {
  const decoded = KeyEvent.decode({ type: e.type, data: e.data });
  if (E.isLeft(decoded)) throw new EventDecodeError(e.stream, e.revision, PathReporter.report(decoded).slice(0, 3));
  return decoded.right;
};

const next = (revision: StreamRevision | 'no_stream'): StreamRevision => (revision === 'no_stream' ? 0 : revision + 1);

/**
 * Loads a key's state without reading its whole stream: from the in-process cache or the newest
 * snapshot of this schema version, then only the events after it. The delta is always read, so
 * the revision handed to the append is the stream's, and a stale cache costs one conflict at most.
 * Latency stays flat with stream length; it grows only with the delta since the last snapshot.
 *
 * The states it holds are its own and move forward IN PLACE (a delta, an append): a key may hold
 * thousands of jobs, and copying them per command made every command cost O(jobs). Each state
 * carries the revision it is at (`at`), and events are applied to it only in order from there, so
 * two callers holding the same state never apply an append twice. A caller may read a state it got
 * from loadMany only until its next await; load() hands out a copy.
 */
export class KeyStateLoader {
  private readonly cache = new Map<string, Loaded>();
  /** The revision each state this loader owns is at now. */
  private readonly at = new WeakMap<KeyState, StreamRevision | 'no_stream'>();

  constructor(
    private readonly store: EventStore,
    private readonly options: {
      readonly snapshots: SnapshotStore | undefined;
      readonly snapshotEvery: number;
      readonly cacheSize: number;
      readonly logger: Logger;
    },
  ) {}

  /** A copy of the key's state, the caller's to keep. */
  async load(stream: string): Promise<Loaded> {
    const { state, revision } = (await this.loadMany([stream])).get(stream)!;
    return { state: draftOf(state), revision };
  }

  /** Several streams at once: their bases from the cache or snapshots, then every delta in one read. */
  async loadMany(streams: readonly string[]): Promise<ReadonlyMap<string, Loaded>> {
    const bases = new Map(await Promise.all(streams.map(async (s) => [s, this.cache.get(s) ?? (await this.fromSnapshot(s))] as const)));
    const deltas = await this.store.readStreams([...bases].map(([stream, base]) => ({ stream, fromRevision: next(base.revision) })));
    const loaded = new Map<string, Loaded>();
    for (const [stream, base] of bases) {
      // Another caller may have moved the state on meanwhile: apply only what it lacks.
      const state = base.state;
      for (const recorded of deltas.get(stream) ?? []) {
        const at = this.at.get(state)!;
        if (at !== 'no_stream' && recorded.revision <= at) continue;
        if (recorded.revision !== next(at)) throw new Error(`key state of ${stream} is at ${at}, the store gave revision ${recorded.revision}`);
        apply(state as Draft, decodeRecorded(recorded));
        this.at.set(state, recorded.revision);
      }
      const fresh: Loaded = { state, revision: this.at.get(state)! };
      this.put(stream, fresh);
      loaded.set(stream, fresh);
    }
    return loaded;
  }

  /**
   * After a successful append: moves the state the decision was made on forward by the appended
   * events (in place, unless something moved it already) and caches it; saves a snapshot when the
   * stream crossed a multiple of snapshotEvery.
   */
  async remember(stream: string, state: KeyState, events: readonly KeyEvent[], before: StreamRevision | 'no_stream', revision: StreamRevision): Promise<void> {
    if (this.at.get(state) === before) {
      for (const event of events) apply(state as Draft, event);
      this.at.set(state, revision);
    }
    if (this.at.get(state) !== revision) return; // moved past it by a later delta: cached already
    this.put(stream, { state, revision });
    const every = this.options.snapshotEvery;
    const { snapshots } = this.options;
    if (!snapshots || every <= 0) return;
    if (Math.floor((revision + 1) / every) === Math.floor(next(before) / every)) return;
    try {
      await snapshots.save({ stream, revision, schemaVersion: KEY_STATE_SCHEMA_VERSION, state });
    } catch (error) {
      // A snapshot only saves reading time; the events are already committed.
      this.options.logger.warn({ stream, revision, err: error }, 'snapshot not saved');
    }
  }

  private put(stream: string, loaded: Loaded): void {
    const cached = this.cache.get(stream);
    // Another call may have cached a newer revision meanwhile; never go back.
    if (cached && cached.revision !== 'no_stream' && loaded.revision !== 'no_stream' && cached.revision > loaded.revision) return;
    this.cache.delete(stream); // re-insert: Map order is the LRU order
    this.cache.set(stream, loaded);
    if (this.cache.size > this.options.cacheSize) this.cache.delete(this.cache.keys().next().value as string);
  }

  private async fromSnapshot(stream: string): Promise<Loaded> {
    const snapshot = await this.options.snapshots?.load(stream);
    if (snapshot === undefined) return this.own(draftOf(initialKeyState), 'no_stream');
    if (snapshot.schemaVersion !== KEY_STATE_SCHEMA_VERSION) {
      this.options.logger.debug({ stream, schemaVersion: snapshot.schemaVersion }, 'snapshot of another schema version ignored');
      return this.own(draftOf(initialKeyState), 'no_stream');
    }
    const state = KeyStateCodec.decode(snapshot.state);
    if (E.isLeft(state)) {
      this.options.logger.warn({ stream, revision: snapshot.revision }, 'snapshot does not decode; folding the stream instead');
      return this.own(draftOf(initialKeyState), 'no_stream');
    }
    // A copy: the decoded object is the snapshot store's.
    return this.own(draftOf(state.right), snapshot.revision);
  }

  private own(state: KeyState, revision: StreamRevision | 'no_stream'): Loaded {
    this.at.set(state, revision);
    return { state, revision };
  }
}

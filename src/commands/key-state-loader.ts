import * as E from 'fp-ts/lib/Either.js';
import { PathReporter } from 'io-ts/lib/PathReporter.js';
import { KeyEvent } from '../domain/events.js';
import { KeyStateCodec, fold, initialKeyState, type KeyState } from '../domain/key-state.js';
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
 */
export class KeyStateLoader {
  private readonly cache = new Map<string, Loaded>();

  constructor(
    private readonly store: EventStore,
    private readonly options: {
      readonly snapshots: SnapshotStore | undefined;
      readonly snapshotEvery: number;
      readonly cacheSize: number;
      readonly logger: Logger;
    },
  ) {}

  async load(stream: string): Promise<Loaded> {
    return (await this.loadMany([stream])).get(stream)!;
  }

  /** Several streams at once: their bases from the cache or snapshots, then every delta in one read. */
  async loadMany(streams: readonly string[]): Promise<ReadonlyMap<string, Loaded>> {
    const bases = new Map(await Promise.all(streams.map(async (s) => [s, this.cache.get(s) ?? (await this.fromSnapshot(s))] as const)));
    const deltas = await this.store.readStreams([...bases].map(([stream, base]) => ({ stream, fromRevision: next(base.revision) })));
    const loaded = new Map<string, Loaded>();
    for (const [stream, base] of bases) {
      const delta = deltas.get(stream) ?? [];
      const last = delta[delta.length - 1];
      if (last === undefined) {
        loaded.set(stream, base);
        continue;
      }
      const fresh: Loaded = { state: fold(base.state, delta.map(decodeRecorded)), revision: last.revision };
      this.put(stream, fresh);
      loaded.set(stream, fresh);
    }
    return loaded;
  }

  /** Caches the state a successful append produced; saves a snapshot when the stream crossed a multiple of snapshotEvery. */
  async remember(stream: string, state: KeyState, revision: StreamRevision, before: StreamRevision | 'no_stream'): Promise<void> {
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
    if (snapshot === undefined) return { state: initialKeyState, revision: 'no_stream' };
    if (snapshot.schemaVersion !== KEY_STATE_SCHEMA_VERSION) {
      this.options.logger.debug({ stream, schemaVersion: snapshot.schemaVersion }, 'snapshot of another schema version ignored');
      return { state: initialKeyState, revision: 'no_stream' };
    }
    const state = KeyStateCodec.decode(snapshot.state);
    if (E.isLeft(state)) {
      this.options.logger.warn({ stream, revision: snapshot.revision }, 'snapshot does not decode; folding the stream instead');
      return { state: initialKeyState, revision: 'no_stream' };
    }
    return { state: state.right, revision: snapshot.revision };
  }
}

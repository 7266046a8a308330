import type { EventStore, StreamRevision } from '../domain/ports/event-store.js';

/** What keyHead reads: the store, and a stream's state now (its latest snapshot and what follows) where the store keeps no head. */
export interface KeyHeadDeps {
  readonly store: EventStore;
  readonly load: (stream: string) => Promise<{ readonly revision: StreamRevision | 'no_stream' }>;
}

/**
 * A key stream's head revision ('no_stream': the key is unknown): the store's head of it where it
 * keeps one (keyStreamHead, one index lookup), else the stream's state loaded. Asking whether a
 * key exists must not load its state: a key of 3,000 waiting jobs has a 500 KB snapshot.
 */
export const keyHead = (deps: KeyHeadDeps, stream: string): Promise<StreamRevision | 'no_stream'> =>
  deps.store.keyStreamHead !== undefined ? deps.store.keyStreamHead(stream) : deps.load(stream).then((s) => s.revision);

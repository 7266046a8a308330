import { fold, initialKeyState, type KeyState } from '../domain/key-state.js';
import type { EventStore, StreamRevision } from '../domain/ports/event-store.js';
import { decodeRecorded } from '../domain/recorded.js';

export interface KeyStateAt {
  readonly state: KeyState;
  /** Revision of the last event folded; 'no_stream' when none was. */
  readonly revision: StreamRevision | 'no_stream';
  /** Decision time of that event (epoch ms). */
  readonly at: number | null;
}

const PAGE = 1_000;

/**
 * A key's state folded from its stream up to a point: the last event at or before `revision`,
 * or decided at or before `at` (epoch ms). Answers "what did this key look like at 03:12?".
 * Time is the stream's order of decisions, so folding stops at the first event decided later.
 */
export const keyStateAt = async (store: EventStore, stream: string, until: { readonly revision?: number; readonly at?: number }): Promise<KeyStateAt> => {
  let state = initialKeyState;
  let revision: StreamRevision | 'no_stream' = 'no_stream';
  let at: number | null = null;
  for (let from = 0; ; from += PAGE) {
    const page = await store.readStream(stream, { fromRevision: from, maxCount: PAGE });
    for (const recorded of page) {
      if (until.revision !== undefined && recorded.revision > until.revision) return { state, revision, at };
      const event = decodeRecorded(recorded);
      if (until.at !== undefined && event.data.at > until.at) return { state, revision, at };
      state = fold(state, [event]);
      revision = recorded.revision;
      at = event.data.at;
    }
    if (page.length < PAGE) return { state, revision, at };
  }
};

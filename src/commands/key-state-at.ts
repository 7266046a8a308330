import { KEY_STATE_SCHEMA_VERSION, apply, draftOf, initialKeyState, snapshotState, type KeyState } from '../domain/key-state.js';
import type { EventStore, SnapshotStore, StreamRevision } from '../domain/ports/event-store.js';
import { decodeRecorded } from '../domain/recorded.js';
import { eachPage } from './job-events.js';
import type { ReadBudget } from './read-budget.js';

export interface KeyStateAt {
  readonly state: KeyState;
  /** Revision of the last event folded; 'no_stream' when none was. */
  readonly revision: StreamRevision | 'no_stream';
  /** Decision time of that event (epoch ms). */
  readonly at: number | null;
}

/**
 * A key's state folded from its stream up to a point: the last event at or before `revision`,
 * or decided at or before `at` (epoch ms). Answers "what did this key look like at 03:12?".
 * Time is the stream's order of decisions, so folding stops at the first event decided later.
 * One state changed in place, a page at a time (see job-events.ts), from the newest kept state
 * the fold would pass (`kept`: snapshots_kept; a kept state whose events were all decided by `at`
 * and lie at or before `revision`), else from the first event: the same state either way (test:
 * "a state at a past moment is the fold's, from a kept state or not").
 */
export const keyStateAt = async (
  store: EventStore,
  stream: string,
  until: { readonly revision?: number; readonly at?: number },
  budget?: ReadBudget,
  kept?: Pick<SnapshotStore, 'keptAt'>,
): Promise<KeyStateAt> => {
  const from = await kept?.keptAt?.(stream, KEY_STATE_SCHEMA_VERSION, until);
  const start = from === undefined ? undefined : snapshotState(from.state);
  const state = draftOf(start ?? initialKeyState);
  let revision: StreamRevision | 'no_stream' = start === undefined ? 'no_stream' : from!.revision;
  let at: number | null = start === undefined ? null : from!.lastAt;
  await eachPage(
    store,
    stream,
    (page) => {
      for (const recorded of page) {
        if (until.revision !== undefined && recorded.revision > until.revision) return false;
        const event = decodeRecorded(recorded);
        if (until.at !== undefined && event.data.at > until.at) return false;
        apply(state, event);
        revision = recorded.revision;
        at = event.data.at;
      }
      return true;
    },
    { from: revision === 'no_stream' ? 0 : revision + 1, budget },
  );
  return { state, revision, at };
};

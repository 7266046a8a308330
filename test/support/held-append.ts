import type pg from 'pg';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import type { EventToAppend } from '../../src/domain/ports/event-store.js';

/**
 * An append left open inside its inline handler until `commit()`: its transaction has an id and
 * has written its event, which thus commits late. `written` resolves once it is in that state.
 */
export function heldAppend(pool: pg.Pool, stream: string, event: EventToAppend) {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  let entered!: () => void;
  const inside = new Promise<void>((resolve) => (entered = resolve));
  const store = new PostgresEventStore(pool, {
    inlineHandlers: [
      async () => {
        entered();
        await gate;
      },
    ],
  });
  const append = store.append(stream, 'any', [event]);
  return {
    written: Promise.race([inside, append.then(() => undefined)]),
    /** Lets the transaction commit, and waits for it. */
    commit: async () => {
      open();
      await append;
    },
    /** Lets it go without waiting (teardown). */
    release: open,
  };
}

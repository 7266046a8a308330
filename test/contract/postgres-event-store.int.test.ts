import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createMigratedDatabase } from '../support/database.js';
import { heldAppend } from '../support/held-append.js';
import { eventStoreContract } from './event-store.contract.js';

eventStoreContract('PostgresEventStore', async () => {
  const db = await createMigratedDatabase(16);
  const store = new PostgresEventStore(db.pool);
  const held: (() => void)[] = [];
  return {
    store,
    // The held transaction is a real append whose inline handler waits for the commit call.
    async holdOpenTransaction(stream, event) {
      const append = heldAppend(db.pool, stream, event);
      held.push(append.release);
      await append.written;
      return append.commit;
    },
    async teardown() {
      held.forEach((release) => release());
      await store.close();
      await db.drop();
    },
  };
});

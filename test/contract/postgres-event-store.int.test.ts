import pg from 'pg';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { migrate } from '../../src/adapters/postgres/migrations.js';
import { createTestDatabase } from '../support/database.js';
import { eventStoreContract } from './event-store.contract.js';

eventStoreContract('PostgresEventStore', async () => {
  const db = await createTestDatabase();
  const pool = new pg.Pool({ connectionString: db.url, max: 16 });
  await migrate(pool);
  const store = new PostgresEventStore(pool);
  const openGates: (() => void)[] = [];
  return {
    store,
    // The held transaction is a real append whose inline handler waits for the commit call.
    async holdOpenTransaction(stream, event) {
      let open!: () => void;
      const gate = new Promise<void>((resolve) => (open = resolve));
      openGates.push(open);
      let written!: () => void;
      const inside = new Promise<void>((resolve) => (written = resolve));
      const holder = new PostgresEventStore(pool, {
        inlineHandlers: [
          async () => {
            written();
            await gate;
          },
        ],
      });
      const append = holder.append(stream, 'any', [event]);
      await Promise.race([inside, append]);
      return async () => {
        open();
        await append;
      };
    },
    async teardown() {
      openGates.forEach((open) => open());
      await store.close();
      // pool.end() resolves before its connections have closed; drop() (FORCE) may kill them first.
      pool.on('error', () => undefined);
      await pool.end();
      await db.drop();
    },
  };
});

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, migrations } from '../../src/adapters/postgres/migrations.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { inTransaction } from '../../src/projections/transaction.js';
import { verify } from '../../src/projections/verify.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';

// Regression: a client checked out of the pool had no 'error' listener (pg-pool listens only
// while a client is idle), so a connection lost while verify, migrate or a projection
// transaction held it emitted an unheard 'error' and ended the process (issue 10 measured
// workers and serve dying of it). Each case parks the client on a lock this test holds,
// terminates its backend, and expects a rejection, no uncaught error (vitest fails the run on
// one), and a pool that still works.

let db: MigratedDatabase;

beforeAll(async () => {
  db = await createMigratedDatabase(4);
});

afterAll(async () => {
  await db?.drop();
});

/** Holds `sql` in an open transaction on a connection of its own until release(). */
const hold = async (sql: string) => {
  const holder = new pg.Client({ connectionString: db.url });
  holder.on('error', () => undefined);
  await holder.connect();
  await holder.query('BEGIN');
  await holder.query(sql);
  return {
    release: async () => {
      await holder.query('ROLLBACK').catch(() => undefined);
      await holder.end().catch(() => undefined);
    },
  };
};

/** Terminates the backend of `applicationName` once it waits on a lock. */
const killWhenWaiting = async (applicationName: string) => {
  const waiting = await until(
    () => db.pool.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`, [applicationName]),
    (r) => r.rows.length === 1,
    `${applicationName} waiting on the lock`,
  );
  await db.pool.query('SELECT pg_terminate_backend($1)', [waiting.rows[0]!.pid]);
};

const cases: { name: string; lock: string; run: (pool: pg.Pool) => Promise<unknown> }[] = [
  { name: 'inTransaction', lock: 'SELECT pg_advisory_xact_lock(4242)', run: (pool) => inTransaction(pool, (client) => client.query('SELECT pg_advisory_xact_lock(4242)')) },
  // Up to the newest version: a current schema's migrate takes no lock otherwise (it is told by two reads).
  { name: 'migrate', lock: `SELECT pg_advisory_xact_lock(hashtextextended('jobledger:migrate', 0))`, run: (pool) => migrate(pool, { upTo: migrations.at(-1)!.version }) },
  { name: 'verify', lock: 'LOCK TABLE jl_keys IN ROW EXCLUSIVE MODE', run: (pool) => verify(pool, createReadModelProjections()) },
];

describe('a connection lost while a client is checked out fails the call, not the process', () => {
  for (const c of cases) {
    it(c.name, async () => {
      const applicationName = `with-client-${c.name}`;
      const pool = new pg.Pool({ connectionString: db.url, max: 1, application_name: applicationName });
      pool.on('error', () => undefined);
      const held = await hold(c.lock);
      try {
        const call = c.run(pool);
        const failed = expect(call).rejects.toThrow();
        await killWhenWaiting(applicationName);
        await failed;
        expect((await pool.query<{ ok: number }>('SELECT 1 AS ok')).rows).toEqual([{ ok: 1 }]);
      } finally {
        await held.release();
        await pool.end();
      }
    });
  }
});

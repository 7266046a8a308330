/**
 * Per-test databases on the server found by ./global-setup.ts.
 *
 *   const db = await createTestDatabase();   // fresh, empty database
 *   ... connect to db.url ...
 *   await db.drop();                          // close your pools first
 *
 * Only usable in projects whose config lists ./global-setup.ts (int, e2e).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { inject } from 'vitest';

export interface TestDatabase {
  readonly url: string;
  drop(): Promise<void>;
}

function serverUrl(): string {
  const url = inject('databaseUrl') ?? process.env.JOBLEDGER_TEST_DATABASE_URL;
  if (!url) {
    throw new Error(
      'No test database server: createTestDatabase() needs test/support/global-setup.ts ' +
        '(run it in the int or e2e vitest project).',
    );
  }
  return url;
}

async function withAdmin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: serverUrl(), connectionTimeoutMillis: 30_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

/** Creates a fresh, empty database with a unique name and returns a URL to it. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const runId = inject('databaseRunId') ?? process.env.JOBLEDGER_TEST_RUN_ID ?? 'x';
  // Unique across parallel workers (pid) and within a worker (random).
  const name = `jl_t_${runId}_${process.pid}_${randomBytes(5).toString('hex')}`;

  await withAdmin(async (client) => {
    for (let attempt = 1; ; attempt++) {
      try {
        await client.query(`CREATE DATABASE ${client.escapeIdentifier(name)}`);
        return;
      } catch (err) {
        // 55006: "source database template1 is being accessed by other users".
        if ((err as { code?: string }).code !== '55006' || attempt >= 20) throw err;
        await sleep(50 * attempt);
      }
    }
  });

  const url = new URL(serverUrl());
  url.pathname = `/${name}`;
  let dropped = false;

  return {
    url: url.toString(),
    async drop() {
      if (dropped) return;
      await withAdmin((client) =>
        client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(name)} WITH (FORCE)`),
      );
      dropped = true;
    },
  };
}

export interface MigratedDatabase extends TestDatabase {
  readonly pool: pg.Pool;
}

/**
 * A fresh database with jobledger's schema and a pool on it; drop() ends the pool, then drops the
 * database. `pipeline` makes the pool's clients pipeline queries, as the ledger's own pool does.
 * `upTo`: the schema as of that migration (a ledger of an older format; migrate() goes on).
 */
export async function createMigratedDatabase(max = 8, options: { pipeline?: boolean; upTo?: number } = {}): Promise<MigratedDatabase> {
  const { migrate } = await import('../../src/adapters/postgres/migrations.js');
  const db = await createTestDatabase();
  const pool = new pg.Pool({ connectionString: db.url, max, pipeline: options.pipeline === true } as pg.PoolConfig);
  // pool.end() resolves before its connections have closed; drop() (FORCE) may kill them first.
  pool.on('error', () => undefined);
  await migrate(pool, options.upTo === undefined ? {} : { upTo: options.upTo });
  return {
    url: db.url,
    pool,
    async drop() {
      await pool.end();
      await db.drop();
    },
  };
}

import pg from 'pg';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './database.js';

async function query<R extends pg.QueryResultRow>(url: string, sql: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

function dbName(url: string): string {
  return decodeURIComponent(new URL(url).pathname.slice(1));
}

async function exists(name: string): Promise<boolean> {
  const rows = await query(inject('databaseUrl'), 'SELECT 1 FROM pg_database WHERE datname = $1', [name]);
  return rows.length === 1;
}

describe('createTestDatabase', () => {
  const created: TestDatabase[] = [];
  afterAll(async () => {
    await Promise.all(created.map((db) => db.drop()));
  });

  it('gives each caller its own empty database', async () => {
    const [a, b] = await Promise.all([createTestDatabase(), createTestDatabase()]);
    created.push(a, b);
    expect(a.url).not.toBe(b.url);

    const tables = `SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = 'public'`;
    expect(await query(a.url, tables)).toEqual([{ n: 0 }]);

    await query(a.url, 'CREATE TABLE only_in_a (id int PRIMARY KEY)');
    await query(a.url, 'INSERT INTO only_in_a VALUES (1)');

    expect(await query(a.url, 'SELECT id FROM only_in_a')).toEqual([{ id: 1 }]);
    expect(await query(b.url, `SELECT to_regclass('public.only_in_a') AS t`)).toEqual([{ t: null }]);
    expect(await query(b.url, tables)).toEqual([{ n: 0 }]);
  });

  it('drop() removes the database, even with open connections, and is idempotent', async () => {
    const db = await createTestDatabase();
    const name = dbName(db.url);
    expect(await exists(name)).toBe(true);

    const open = new pg.Client({ connectionString: db.url });
    open.on('error', () => {}); // it will be terminated by drop()
    await open.connect();
    try {
      await db.drop();
      expect(await exists(name)).toBe(false);
      await db.drop();
    } finally {
      await open.end().catch(() => {});
    }
    await expect(query(db.url, 'SELECT 1')).rejects.toThrow(/does not exist/);
  });
});

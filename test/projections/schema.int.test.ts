import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

let db: MigratedDatabase;

beforeAll(async () => {
  db = await createMigratedDatabase(2);
});

afterAll(async () => {
  await db.drop();
});

const RELATIONS = ['projection_streams', 'projection_checkpoints', 'jl_jobs', 'jl_slots', 'jl_parked', 'jl_keys', 'jl_key_stats', 'dispatch_jobs'];

describe('migration 0003 (read models)', () => {
  it('documents every table, view, column and index', async () => {
    const { rows } = await db.pool.query<{ what: string }>(
      `SELECT c.relname || '.' || a.attname AS what
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
       WHERE c.relname = ANY ($1) AND a.attnum > 0 AND NOT a.attisdropped AND col_description(c.oid, a.attnum) IS NULL
       UNION ALL
       SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
       WHERE t.relname = ANY ($1) AND obj_description(i.oid, 'pg_class') IS NULL
       UNION ALL
       SELECT relname FROM pg_class WHERE relname = ANY ($1) AND obj_description(oid, 'pg_class') IS NULL`,
      [RELATIONS],
    );
    expect(rows.map((row) => row.what)).toEqual([]);
    const { rows: found } = await db.pool.query(`SELECT count(*)::int AS n FROM pg_class WHERE relname = ANY ($1)`, [RELATIONS]);
    expect(found[0].n).toBe(RELATIONS.length);
  });

  it('the sweeper finds due jobs and expired leases through their indexes', async () => {
    await db.pool.query('SET enable_seqscan = off');
    const plan = async (sql: string) => (await db.pool.query(`EXPLAIN ${sql}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(await plan(`SELECT DISTINCT stream FROM jl_jobs WHERE status = 'scheduled' AND run_at <= now()`)).toMatch(/jl_jobs_due/);
    expect(await plan(`SELECT DISTINCT stream FROM jl_slots WHERE expires_at <= now()`)).toMatch(/jl_slots_expiry/);
    await db.pool.query('RESET enable_seqscan');
  });
});

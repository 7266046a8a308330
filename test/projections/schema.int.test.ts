import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

let db: MigratedDatabase;

beforeAll(async () => {
  db = await createMigratedDatabase(2);
});

afterAll(async () => {
  await db.drop();
});


describe('migration 0003 (read models)', () => {
  it('the sweeper finds due jobs and expired leases through their indexes', async () => {
    await db.pool.query('SET enable_seqscan = off');
    const plan = async (sql: string) => (await db.pool.query(`EXPLAIN ${sql}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(await plan(`SELECT DISTINCT stream FROM jl_jobs WHERE status = 'scheduled' AND run_at <= now()`)).toMatch(/jl_jobs_due/);
    expect(await plan(`SELECT DISTINCT stream FROM jl_slots WHERE expires_at <= now()`)).toMatch(/jl_slots_expiry/);
    await db.pool.query('RESET enable_seqscan');
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { createDispatcher } from '../../src/projections/dispatcher.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { NotRebuildableError, ProjectionBusyError } from '../../src/projections/rebuild.js';
import { projectionLockSql } from '../../src/projections/checkpoint.js';
import { verify } from '../../src/projections/verify.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { manualClock, randomRun } from './support.js';
import { silentLogger } from '../../src/domain/ports/logger.js';

let db: MigratedDatabase;
let ledger: Ledger;
const clock = manualClock();

beforeAll(async () => {
  db = await createMigratedDatabase(30, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: clock.now, logger: silentLogger });
  await randomRun(ledger, clock, { seed: 7, steps: 250, keys: ['vf:a', 'vf:b', 'vf:c'], prefix: 'vf' });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

/** What verify must leave as it was: the read models (the jobs' rows the workers claim among them), the checkpoints, and no scratch schema. */
const everything = async () => {
  const out: Record<string, unknown[]> = {};
  for (const [table, order] of [
    ['jl_jobs', 'job_id'],
    ['jl_slots', 'job_id'],
    ['jl_parked', 'job_id'],
    ['jl_keys', 'stream'],
    ['projection_checkpoints', 'projection'],
  ]) out[table!] = (await db.pool.query(`SELECT * FROM ${table} ORDER BY ${order}`)).rows;
  out.schemas = (await db.pool.query(`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'jobledger_verify_%'`)).rows;
  return out;
};

describe('verify', () => {
  it('finds no difference between the live read models (one batch per flush) and a replay of the ledger in batches of any size, and writes nothing', async () => {
    const before = await everything();
    const total = Number((await db.pool.query('SELECT count(*) AS n FROM events')).rows[0].n);
    for (const batchSize of [1, 100, undefined]) {
      const progress: number[] = [];
      const result = await verify(db.pool, createReadModelProjections(), { ...(batchSize === undefined ? {} : { batchSize }), onProgress: (p) => progress.push(p.events) });
      expect(result).toMatchObject({ projection: 'read_models', events: total, differences: [] });
      expect(result.rows).toEqual({ jl_keys: before.jl_keys!.length, jl_jobs: before.jl_jobs!.length, jl_limit_jobs: 0 });
      expect(progress.at(-1)).toBe(total);
      expect(await everything()).toEqual(before);
    }
    expect(before.jl_parked!.length).toBeGreaterThan(0);
    expect(before.jl_slots!.length).toBeGreaterThan(0);
  });

  it('reports a changed, a missing and an extra row by table and primary key, and changes nothing', async () => {
    const job = (await db.pool.query<{ job_id: string; status: string; attempts: number }>(`SELECT job_id, status, attempts FROM jl_jobs WHERE status <> 'dead' ORDER BY job_id LIMIT 1`)).rows[0]!;
    const slot = (await db.pool.query<{ job_id: string }>(`SELECT job_id FROM jl_slots WHERE expires_at IS NULL ORDER BY job_id LIMIT 1`)).rows[0]!;
    const parked = (await db.pool.query<{ job_id: string; seq: string }>(`SELECT job_id, seq FROM jl_parked ORDER BY job_id LIMIT 1`)).rows[0]!;
    expect(new Set([job.job_id, slot.job_id, parked.job_id]).size).toBe(3);
    await db.pool.query(`UPDATE jl_jobs SET status = 'dead', attempts = attempts + 7 WHERE job_id = $1`, [job.job_id]);
    // A parked job moved in its line (jl_parked is a view of jl_jobs: its place is park_seq there).
    await db.pool.query(`UPDATE jl_jobs SET park_seq = park_seq + 1000 WHERE job_id = $1`, [parked.job_id]);
    await db.pool.query(`INSERT INTO jl_keys (stream, key, concurrency_limit, lease_ms, updated_at) VALUES ('key:ghost', 'ghost', 1, 1000, now())`);
    // An unstarted admission given an expiry: the sweeper would reclaim it.
    await db.pool.query(`UPDATE jl_jobs SET expires_at = '2030-01-01T00:00:00Z' WHERE job_id = $1`, [slot.job_id]);
    const tampered = await everything();
    const { differences } = await verify(db.pool, createReadModelProjections());
    // In the tables' write order (jl_keys, jl_jobs, jl_limit_jobs), then primary-key order.
    const jobs = [
      {
        table: 'jl_jobs',
        key: { job_id: job.job_id },
        kind: 'changed',
        columns: [
          { column: 'status', live: 'dead', ledger: job.status },
          { column: 'attempts', live: job.attempts + 7, ledger: job.attempts },
        ],
      },
      { table: 'jl_jobs', key: { job_id: slot.job_id }, kind: 'changed', columns: [{ column: 'expires_at', live: expect.any(String), ledger: null }] },
      { table: 'jl_jobs', key: { job_id: parked.job_id }, kind: 'changed', columns: [{ column: 'park_seq', live: Number(parked.seq) + 1000, ledger: Number(parked.seq) }] },
    ];
    expect(differences[0]).toEqual({ table: 'jl_keys', key: { stream: 'key:ghost' }, kind: 'extra', columns: [] });
    expect(differences.slice(1)).toHaveLength(jobs.length);
    expect(differences.slice(1)).toEqual(expect.arrayContaining(jobs));
    expect(await everything()).toEqual(tampered);
  });

  it('refuses the dispatcher, and a projection an async runner holds', async () => {
    await expect(verify(db.pool, createDispatcher())).rejects.toBeInstanceOf(NotRebuildableError);
    const runner = await db.pool.connect();
    try {
      await runner.query(`SELECT pg_advisory_lock(${projectionLockSql(1)})`, ['read_models']);
      await expect(verify(db.pool, createReadModelProjections())).rejects.toBeInstanceOf(ProjectionBusyError);
    } finally {
      await runner.query(`SELECT pg_advisory_unlock_all()`);
      runner.release();
    }
  });

  it('reports no difference while appends with inline projections go on: the live tables hold still during the comparison', async () => {
    const fresh = await createMigratedDatabase(12);
    const writer = await createLedger({ pool: fresh.pool, migrate: false, logger: silentLogger });
    try {
      let writing = true;
      const work = (async () => {
        for (let i = 0; writing || i < 20; i++) await writer.enqueue({ name: 'live', key: `busy:${i % 3}`, limit: 2, jobId: `busy-${i}` });
      })();
      const found: unknown[] = [];
      for (let round = 0; round < 5; round++) found.push(...(await verify(fresh.pool, createReadModelProjections())).differences);
      writing = false;
      await work;
      expect(found).toEqual([]);
      expect((await verify(fresh.pool, createReadModelProjections())).differences).toEqual([]);
    } finally {
      await writer.close();
      await fresh.drop();
    }
  });
});

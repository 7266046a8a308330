import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { ProjectionModeError } from '../../src/adapters/postgres/projection-mode.js';
import { claimStatement } from '../../src/adapters/queue/job-queue.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { DISPATCHER } from '../../src/projections/dispatcher.js';
import { READ_MODELS } from '../../src/projections/read-models.js';
import { projectionLockSql } from '../../src/projections/checkpoint.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { count, waitFor } from './support.js';

// How a database is projected (ledger_settings, migration 0005): the first ledger that opens it
// records inline or async; every later one follows it, and one asking for the other mode fails
// before anything is written. In async mode, Ledger.start() runs the read models' and the
// dispatcher's runners, and close() stops them.

let db: MigratedDatabase;

beforeAll(async () => {
  db = await createMigratedDatabase(12, { pipeline: true });
});

afterAll(async () => {
  await db.drop();
});

const n = (d: MigratedDatabase, sql: string, values: unknown[] = []) => count(d.pool, sql, values);

/** Everything a ledger could have written: events, settings, read models (the jobs' rows, their dispatch messages), checkpoints. */
const written = async (d: MigratedDatabase) =>
  (
    await d.pool.query(`SELECT (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM streams) AS streams,
      (SELECT json_agg(s ORDER BY name) FROM ledger_settings s) AS settings, (SELECT count(*) FROM jl_jobs) AS jobs, (SELECT count(*) FROM jl_keys) AS keys,
      (SELECT json_agg(c.projection ORDER BY c.projection) FROM projection_checkpoints c) AS checkpoints`)
  ).rows[0];

/** Connections to the database (a ledger that failed to open must leave none of its own). */
const connections = (d: MigratedDatabase) => n(d, `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database()`);

/** Whether some session holds the projection's runner lock. */
const lockHeld = async (d: MigratedDatabase, projection: string) => {
  const client = await d.pool.connect();
  try {
    const { rows } = await client.query(`SELECT pg_try_advisory_lock(${projectionLockSql(1)}) AS free`, [projection]);
    if (rows[0].free) await client.query(`SELECT pg_advisory_unlock(${projectionLockSql(1)})`, [projection]);
    return !rows[0].free;
  } finally {
    client.release();
  }
};

describe('Ledger opened with inline projections off (async mode)', () => {
  let ledger: Ledger;

  it('a fresh database opened with inlineProjections: false is projected async from then on', async () => {
    ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger, inlineProjections: false });
    expect(ledger.projectionMode).toBe('async');
    expect(ledger.directHandoff).toBe(false);
    expect((await db.pool.query(`SELECT name, value FROM ledger_settings`)).rows).toEqual([{ name: 'projections', value: 'async' }]);
  });

  it('applies nothing until start(); then its two runners build the read models and dispatch each admission once', async () => {
    await ledger.enqueueMany([
      { name: 'work', key: 'k', limit: 1, jobId: 'a', args: { n: 1 } },
      { name: 'work', key: 'k', jobId: 'b' },
    ]);
    expect(await n(db, 'SELECT count(*) AS n FROM jl_jobs')).toBe(0);
    expect(await lockHeld(db, READ_MODELS)).toBe(false);

    ledger.start();
    await waitFor('the read models', async () => (await n(db, `SELECT count(*) AS n FROM jl_jobs`)) === 2, 120_000);
    // a's row is its dispatch message: claimable, as a worker's read sees it.
    const claim = claimStatement({ queue: 'default', qty: 10, skipStreams: [], skipJobs: [] });
    expect((await db.pool.query(claim.text, claim.values as unknown[])).rows).toEqual([{ jobId: 'a', key: 'k', stream: 'key:k', leaseId: 'a:1', name: 'work', args: { n: 1 }, attempt: 1, leaseMs: 30_000 }]);
    expect(await n(db, `SELECT count(*) AS n FROM jl_slots WHERE job_id = 'a' AND expires_at IS NULL`)).toBe(1);
    expect(await n(db, `SELECT count(*) AS n FROM jl_parked WHERE job_id = 'b'`)).toBe(1);
    await waitFor('both checkpoints', async () => (await n(db, `SELECT count(*) AS n FROM projection_checkpoints`)) === 2);
    expect((await db.pool.query(`SELECT projection FROM projection_checkpoints ORDER BY projection`)).rows.map((r) => r.projection)).toEqual([DISPATCHER, READ_MODELS]);
    expect(await lockHeld(db, READ_MODELS)).toBe(true);
    expect(await lockHeld(db, DISPATCHER)).toBe(true);
  }, 240_000);

  it('close() stops the runners: their advisory locks are let go', async () => {
    await ledger.close();
    const held = await n(db, `SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`);
    expect(held).toBe(0);
  });

  it('a ledger leaving the option out follows the database (async)', async () => {
    const follower = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
    expect(follower.projectionMode).toBe('async');
    await follower.close();
  });
});

describe('one database, one projection mode', () => {
  it('opening an async database with inline projections throws ProjectionModeError and writes nothing (nor leaves a connection open)', async () => {
    const before = await written(db);
    const error = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger, inlineProjections: true }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProjectionModeError);
    expect(error).toMatchObject({ recorded: 'async', wanted: 'inline' });
    expect(String((error as Error).message)).toMatch(/inlineProjections: false/);
    // The same through a databaseUrl: the pool the ledger made is ended.
    const open = await connections(db);
    await expect(createLedger({ databaseUrl: db.url, logger: silentLogger, inlineProjections: true })).rejects.toBeInstanceOf(ProjectionModeError);
    await waitFor('the failed ledger to close its pool', async () => (await connections(db)) <= open);
    expect(await written(db)).toEqual(before);
  });

  it('opening an inline database with inline projections off throws ProjectionModeError and writes nothing; the default follows it', async () => {
    const fresh = await createMigratedDatabase(6, { pipeline: true });
    try {
      const first = await createLedger({ pool: fresh.pool, migrate: false, logger: silentLogger });
      expect(first.projectionMode).toBe('inline');
      await first.enqueue({ name: 'x', key: 'k', jobId: 'x1' });
      await first.close();
      const before = await written(fresh);
      expect(before.settings).toEqual([{ name: 'projections', value: 'inline' }]);
      const error = await createLedger({ pool: fresh.pool, migrate: false, logger: silentLogger, inlineProjections: false }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ProjectionModeError);
      expect(error).toMatchObject({ recorded: 'inline', wanted: 'async' });
      expect(await written(fresh)).toEqual(before);
      // Inline mode runs no projection runner, even once started.
      const again = await createLedger({ pool: fresh.pool, migrate: false, logger: silentLogger, sweepIntervalMs: 60_000 });
      expect(again.projectionMode).toBe('inline');
      again.start();
      await new Promise((r) => setTimeout(r, 300));
      expect(await lockHeld(fresh, READ_MODELS)).toBe(false);
      expect(await lockHeld(fresh, DISPATCHER)).toBe(false);
      await again.close();
      expect(await written(fresh)).toEqual(before);
    } finally {
      await fresh.drop();
    }
  });

  it('two first ledgers asking for different modes at once: exactly one mode is recorded, and the other ledger fails', async () => {
    const fresh = await createMigratedDatabase(6, { pipeline: true });
    try {
      const results = await Promise.allSettled([
        createLedger({ pool: fresh.pool, migrate: false, logger: silentLogger, inlineProjections: true }),
        createLedger({ pool: fresh.pool, migrate: false, logger: silentLogger, inlineProjections: false }),
      ]);
      const opened = results.filter((r): r is PromiseFulfilledResult<Ledger> => r.status === 'fulfilled');
      const failed = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      expect(opened).toHaveLength(1);
      expect(failed).toHaveLength(1);
      expect(failed[0]!.reason).toBeInstanceOf(ProjectionModeError);
      const mode = opened[0]!.value.projectionMode;
      expect((await fresh.pool.query(`SELECT value FROM ledger_settings WHERE name = 'projections'`)).rows).toEqual([{ value: mode }]);
      expect(failed[0]!.reason).toMatchObject({ recorded: mode });
      await opened[0]!.value.close();
    } finally {
      await fresh.drop();
    }
  });
});

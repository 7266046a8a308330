import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { DISPATCHER } from '../../src/projections/dispatcher.js';
import { READ_MODELS } from '../../src/projections/read-models.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// Ledger.start() with inline projections off: the ledger's own async runners apply the read
// models and the dispatcher; close() stops them.

let db: MigratedDatabase;

beforeAll(async () => {
  db = await createMigratedDatabase(12, { pipeline: true });
});

afterAll(async () => {
  await db.drop();
});

const waitFor = async (what: string, check: () => Promise<boolean>, timeoutMs = 20_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
};

const count = async (sql: string, values: unknown[] = []) => (await db.pool.query<{ n: number }>(sql, values)).rows[0]!.n;

describe('Ledger opened with inline projections off', () => {
  let ledger: Ledger;

  it('applies nothing until start(); then its runners build the read models and dispatch each admission once', async () => {
    ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger, inlineProjections: false });
    expect(ledger.projectionMode).toBe('async');
    expect(ledger.asyncProjections.map((p) => p.name)).toEqual([READ_MODELS, DISPATCHER]);
    await ledger.enqueueMany([
      { name: 'work', key: 'k', limit: 1, jobId: 'a' },
      { name: 'work', key: 'k', jobId: 'b' },
    ]);
    expect(await count('SELECT count(*)::int AS n FROM jl_jobs')).toBe(0);
    expect(await count('SELECT count(*)::int AS n FROM queue_messages')).toBe(0);

    ledger.start();
    await waitFor('the read models', async () => (await count(`SELECT count(*)::int AS n FROM jl_jobs`)) === 2);
    await waitFor('the dispatch of a', async () => (await count(`SELECT count(*)::int AS n FROM queue_messages`)) === 1);
    expect(await count(`SELECT count(*)::int AS n FROM jl_slots WHERE job_id = 'a'`)).toBe(1);
    expect(await count(`SELECT count(*)::int AS n FROM jl_parked WHERE job_id = 'b'`)).toBe(1);
    await waitFor('both checkpoints', async () => (await count(`SELECT count(*)::int AS n FROM projection_checkpoints`)) === 2);
  });

  it('close() stops the runners: their advisory locks are let go', async () => {
    await ledger.close();
    const held = await count(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`);
    expect(held).toBe(0);
  });

  it('a ledger with inline projections (the default) has no async projection', async () => {
    const inline = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
    expect(inline.projectionMode).toBe('inline');
    expect(inline.asyncProjections).toEqual([]);
    await inline.close();
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { mk, type KeyEvent } from '../../src/domain/events.js';
import { createDispatcher } from '../../src/projections/dispatcher.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { rebuild } from '../../src/projections/rebuild.js';
import { verify } from '../../src/projections/verify.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { expectClaimableMatchFold, expectReadModelsMatchFold, manualClock, randomRun, readModelRows } from './support.js';

// Stacked limits in the read models: a small history written as the decider writes it (each step
// one transaction over the job's home stream and its limit key's), through the inline projections,
// checked against the fold after every step; then a rebuild (in batches of any size) must give
// the same rows and verify must find none different. Then the same over a random run of the real
// ledger with jobs under further limits.

let db: MigratedDatabase;
let store: PostgresEventStore;

const at = Date.UTC(2030, 0, 1);
const S = 1_000;
const A = 'key:a';
const T = 'key:t';

beforeAll(async () => {
  db = await createMigratedDatabase(2, { pipeline: true });
  store = new PostgresEventStore(db.pool, { inline: [createReadModelProjections(), createDispatcher()] });
});

afterAll(async () => {
  await store.close();
  await db.drop();
});

/** One transaction: each stream's events, in this order. */
const step = (...appends: [string, ...KeyEvent[]][]) =>
  store.appendMany(appends.map(([stream, ...events]) => ({ stream, expected: 'any' as const, events: events.map((e) => ({ type: e.type, data: e.data as never })) })));

const guests = async () =>
  (await db.pool.query(`SELECT stream, key, job_id, home, status, lease_id, extract(epoch FROM since) * 1000 AS since, priority::int, seq::int FROM jl_limit_jobs ORDER BY stream, job_id`)).rows.map(
    (r) => ({ ...r, since: Number(r.since) }),
  );

const stats = async (stream: string) =>
  (await db.pool.query(`SELECT in_use, parked, guests_holding, guests_parked, extract(epoch FROM oldest_parked_at) * 1000 AS oldest FROM jl_key_stats WHERE stream = $1`, [stream])).rows.map((r) => ({
    ...r,
    oldest: r.oldest === null ? null : Number(r.oldest),
  }))[0];

const guest = { jobId: 'g1', home: A, limits: ['t'], priority: 0 };
const enqueued = (jobId: string, extra: object = {}) =>
  mk('JobEnqueued', { jobId, name: 'n', args: null, queue: 'default', priority: 0, maxAttempts: 3, leaseMs: 30_000, runAt: null, at, ...extra });

describe('a job under a further limit key (home key:a, limits [t])', () => {
  it('its guest row on key:t follows the wait, the hold, the release and a retry; the read models are the fold at every step', async () => {
    // t's own t1 takes t's only slot.
    await step([T, mk('KeyLimitSet', { limit: 1, leaseMs: 30_000, by: null, at }), enqueued('t1'), mk('SlotAcquired', { jobId: 't1', leaseId: 't1:1', expiresAt: null, at })]);
    // g1 of key a: a has room, t is full, so it parks at home and waits in t's line.
    await step(
      [A, mk('KeyLimitSet', { limit: 1, leaseMs: 30_000, by: null, at: at + S }), enqueued('g1', { limits: ['t'], at: at + S }), mk('JobParked', { jobId: 'g1', at: at + S })],
      [T, mk('LimitWaiting', { ...guest, at: at + S })],
    );
    expect(await guests()).toEqual([{ stream: T, key: 't', job_id: 'g1', home: A, status: 'parked', lease_id: null, since: at + S, priority: 0, seq: 3 }]);
    expect((await db.pool.query(`SELECT job_id, limits FROM jl_jobs ORDER BY job_id`)).rows).toEqual([{ job_id: 'g1', limits: ['t'] }, { job_id: 't1', limits: null }]);
    expect(await stats(T)).toEqual({ in_use: 1, parked: 1, guests_holding: 0, guests_parked: 1, oldest: at + S });
    expect(await stats(A)).toEqual({ in_use: 0, parked: 1, guests_holding: 0, guests_parked: 0, oldest: at + S });
    await expectReadModelsMatchFold(db.pool, [A, T]);

    // t1 completes: its slot goes to g1, promoted at home, held on t (it keeps its place's seq).
    await step(
      [T, mk('JobCompleted', { jobId: 't1', leaseId: 't1:1', at: at + 2 * S }), mk('SlotReleased', { jobId: 't1', leaseId: 't1:1', reason: 'completed', at: at + 2 * S })],
      [A, mk('JobPromoted', { jobId: 'g1', leaseId: 'g1:1', expiresAt: null, waitedMs: S, at: at + 2 * S })],
      [T, mk('LimitHeld', { ...guest, leaseId: 'g1:1', waitedMs: S, at: at + 2 * S })],
    );
    expect(await guests()).toEqual([{ stream: T, key: 't', job_id: 'g1', home: A, status: 'holding', lease_id: 'g1:1', since: at + 2 * S, priority: 0, seq: 3 }]);
    expect(await stats(T)).toEqual({ in_use: 1, parked: 0, guests_holding: 1, guests_parked: 0, oldest: null });
    await expectReadModelsMatchFold(db.pool, [A, T]);

    // Started at home (its lease is the home's), then it fails and is scheduled for a retry: released on t.
    await step([A, mk('JobStarted', { jobId: 'g1', leaseId: 'g1:1', workerId: 'w1', attempt: 1, expiresAt: at + 33 * S, at: at + 3 * S })]);
    expect(await guests()).toEqual([expect.objectContaining({ status: 'holding', lease_id: 'g1:1' })]);
    await step(
      [A, mk('JobFailed', { jobId: 'g1', leaseId: 'g1:1', attempt: 1, error: 'boom', retryAt: at + 10 * S, at: at + 4 * S }), mk('SlotReleased', { jobId: 'g1', leaseId: 'g1:1', reason: 'failed', at: at + 4 * S }), mk('JobScheduled', { jobId: 'g1', runAt: at + 10 * S, at: at + 4 * S })],
      [T, mk('LimitReleased', { jobId: 'g1', leaseId: 'g1:1', reason: 'failed', at: at + 4 * S })],
    );
    expect(await guests()).toEqual([]);
    expect(await stats(T)).toEqual({ in_use: 0, parked: 0, guests_holding: 0, guests_parked: 0, oldest: null });
    await expectReadModelsMatchFold(db.pool, [A, T]);

    // Due: admitted at once on both; a guest again, with a new place.
    await step([A, mk('SlotAcquired', { jobId: 'g1', leaseId: 'g1:2', expiresAt: null, at: at + 10 * S })], [T, mk('LimitHeld', { ...guest, leaseId: 'g1:2', waitedMs: 0, at: at + 10 * S })]);
    expect(await guests()).toEqual([{ stream: T, key: 't', job_id: 'g1', home: A, status: 'holding', lease_id: 'g1:2', since: at + 10 * S, priority: 0, seq: 8 }]);
    await expectReadModelsMatchFold(db.pool, [A, T]);
  });

  it('a rebuild, in batches of any size, gives the same rows; verify finds none different, and names a guest row by its whole key (stream, job_id)', async () => {
    const live = await readModelRows(db.pool);
    expect(live.jl_limit_jobs).toHaveLength(1);
    for (const batchSize of [1, 2, 5, undefined]) {
      await rebuild(db.pool, createReadModelProjections(), batchSize === undefined ? {} : { batchSize });
      expect(await readModelRows(db.pool), `batchSize ${batchSize}`).toEqual(live);
      const verified = await verify(db.pool, createReadModelProjections(), batchSize === undefined ? {} : { batchSize });
      expect(verified.differences).toEqual([]);
      expect(verified.rows.jl_limit_jobs).toBe(1);
    }

    // The same job as a guest of another key: a row of its own, told apart by stream.
    await db.pool.query(`INSERT INTO jl_limit_jobs SELECT 'key:u', 'u', job_id, home, status, lease_id, since, priority, seq FROM jl_limit_jobs WHERE stream = $1`, [T]);
    await db.pool.query(`UPDATE jl_limit_jobs SET status = 'parked', lease_id = NULL WHERE stream = $1`, [T]);
    expect((await verify(db.pool, createReadModelProjections())).differences).toEqual([
      {
        table: 'jl_limit_jobs',
        key: { stream: T, job_id: 'g1' },
        kind: 'changed',
        columns: [
          { column: 'status', live: 'parked', ledger: 'holding' },
          { column: 'lease_id', live: null, ledger: 'g1:2' },
        ],
      },
      { table: 'jl_limit_jobs', key: { stream: 'key:u', job_id: 'g1' }, kind: 'extra', columns: [] },
    ]);
    await rebuild(db.pool, createReadModelProjections());
    expect(await readModelRows(db.pool)).toEqual(live);
  });
});

describe('a random run with jobs under further limit keys, through the ledger', () => {
  it('read models = fold of every stream (guests included), one message per admission; a rebuild gives the same rows and verify none different', async () => {
    const fresh = await createMigratedDatabase(8, { pipeline: true });
    const clock = manualClock();
    const ledger = await createLedger({ pool: fresh.pool, migrate: false, clock: clock.now, logger: silentLogger });
    try {
      await randomRun(ledger, clock, { seed: 11, steps: 300, keys: ['lr:a', 'lr:b', 'lr:c'], limitKeys: ['lr:t', 'lr:u'], prefix: 'lr' });
      const live = await readModelRows(fresh.pool);
      // The run did put jobs under the limit keys, and some of them waited there.
      expect(live.jl_limit_jobs!.length).toBeGreaterThan(0);
      const seen = (await fresh.pool.query(`SELECT count(DISTINCT type)::int AS n FROM events WHERE type IN ('LimitWaiting', 'LimitHeld', 'LimitReleased', 'LimitLeft')`)).rows[0].n;
      expect(seen).toBe(4);
      await expectReadModelsMatchFold(fresh.pool);
      await expectClaimableMatchFold(fresh.pool);
      for (const batchSize of [7, undefined]) {
        await rebuild(fresh.pool, createReadModelProjections(), batchSize === undefined ? {} : { batchSize });
        expect(await readModelRows(fresh.pool), `batchSize ${batchSize}`).toEqual(live);
      }
      expect((await verify(fresh.pool, createReadModelProjections(), { batchSize: 13 })).differences).toEqual([]);
    } finally {
      await ledger.close();
      await fresh.drop();
    }
  });
});

import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { LimitConflictError } from '../../src/domain/errors.js';
import { holders, jobsIn, type KeyState } from '../../src/domain/key-state.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';

// Issue 11, parts 1 and 2, through the ledger on real PostgreSQL: a job under further limit keys
// holds a slot in its key and in every limit key at once, or waits in all their lines, decided in
// one transaction across their streams; queue caps are such a limit key, set from configuration.

let db: MigratedDatabase;
let ledger: Ledger;

beforeAll(async () => {
  db = await createMigratedDatabase(6, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

const eventCount = async (): Promise<number> => (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;
const state = async (key: string): Promise<KeyState> => (await ledger.keyState(key)).state;
const statusIn = async (key: string, jobId: string) => (await state(key)).jobs[jobId]?.status;

/** Starts and completes a holder the way a worker does, through the ledger's one writer. */
const run = async (key: string, jobId: string): Promise<void> => {
  const lease = (await state(key)).jobs[jobId]?.lease;
  if (!lease) throw new Error(`${jobId} holds no slot on ${key}`);
  const started = await ledger.execute(keyStream(key), { type: 'Start', jobId, leaseId: lease.leaseId, workerId: 'w' });
  expect(E.isRight(started)).toBe(true);
  const done = await ledger.execute(keyStream(key), { type: 'Complete', jobId, leaseId: lease.leaseId });
  expect(E.isRight(done)).toBe(true);
};

describe('a job under further limits', () => {
  it('takes a slot in its key and in each limit key in one append, with the same lease', async () => {
    const [r] = await ledger.enqueueMany([{ name: 'sync', key: 'sl1:a', limit: 2, limits: [{ key: 'sl1:tenant', limit: 1 }, { key: 'sl1:api', limit: 5 }], jobId: 'sl1-1' }]);
    expect(r!.status).toBe('acquired');
    const lease = (await state('sl1:a')).jobs['sl1-1']!.lease!.leaseId;
    for (const key of ['sl1:tenant', 'sl1:api']) {
      const s = await state(key);
      expect(holders(s).map((h) => [h.jobId, h.lease!.leaseId, h.home])).toEqual([['sl1-1', lease, keyStream('sl1:a')]]);
    }
    expect((await state('sl1:tenant')).limit).toBe(1);
    expect((await state('sl1:api')).limit).toBe(5);
    const { rows } = await db.pool.query<{ stream: string; transaction_id: string }>(`SELECT DISTINCT stream, transaction_id::text FROM events WHERE stream LIKE 'key:sl1:%'`);
    expect(new Set(rows.map((r) => r.transaction_id)).size).toBe(1);
  });

  it('waits in every line when one limit is full, and is promoted from the limit key that frees last', async () => {
    await ledger.enqueue({ name: 'sync', key: 'sl2:a', limit: 1, limits: [{ key: 'sl2:t', limit: 1 }], jobId: 'sl2-a' });
    const [b] = await ledger.enqueueMany([{ name: 'sync', key: 'sl2:b', limit: 1, limits: [{ key: 'sl2:t' }], jobId: 'sl2-b' }]);
    expect(b!.status).toBe('parked');
    expect(jobsIn(await state('sl2:t'), 'parked').map((j) => [j.jobId, j.home])).toEqual([['sl2-b', keyStream('sl2:b')]]);
    await run('sl2:a', 'sl2-a');
    // The release frees sl2:t; b's home is another key, served by the writer's follow-up.
    await until(() => statusIn('sl2:b', 'sl2-b'), (s) => s === 'holding', 'sl2-b promoted at home');
    expect((await state('sl2:t')).jobs['sl2-b']?.status).toBe('holding');
    expect(holders(await state('sl2:a'))).toEqual([]);
  });

  it('regression: a limit key named with another limit than its recorded one is refused naming that key, and nothing is written', async () => {
    await ledger.enqueue({ name: 'sync', key: 'sl3:a', limits: [{ key: 'sl3:t', limit: 2 }], jobId: 'sl3-1' });
    const before = await eventCount();
    const refused = await ledger.enqueue({ name: 'sync', key: 'sl3:b', limits: [{ key: 'sl3:t', limit: 3 }], jobId: 'sl3-2' }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LimitConflictError);
    expect(refused).toMatchObject({ key: 'sl3:t', recorded: 2, requested: 3 });
    expect(await eventCount()).toBe(before);
  });

  it('refuses its own key as a further limit, naming the field, and writes nothing', async () => {
    const before = await eventCount();
    await expect(ledger.enqueue({ name: 'sync', key: 'sl4:a', limits: [{ key: 'sl4:a' }] })).rejects.toMatchObject({ name: 'ValidationError', field: 'limits[0].key' });
    await expect(ledger.enqueue({ name: 'sync', key: 'sl4:a', limits: [{ key: 'sl4:t' }, { key: 'sl4:t' }] })).rejects.toMatchObject({ name: 'ValidationError', field: 'limits' });
    expect(await eventCount()).toBe(before);
  });
});

describe('queue caps from configuration', () => {
  it('records the cap as the queue key\'s limit, by config, changes it when the configuration does, and holds jobs of the queue to it', async () => {
    const open = (maxConcurrent: number) => createLedger({ pool: db.pool, migrate: false, logger: silentLogger, queues: { builds: { maxConcurrent } } });
    const first = await open(2);
    const limitEvents = async () => (await ledger.store.readStream(keyStream('queue:builds'))).filter((e) => e.type === 'KeyLimitSet').map((e) => [(e.data as { limit: number }).limit, (e.data as { by: string }).by]);
    expect(await limitEvents()).toEqual([[2, 'config']]);
    const results = await first.enqueueMany([1, 2, 3].map((i) => ({ name: 'build', key: `qc:repo-${i}`, queue: 'builds', jobId: `qc-${i}` })));
    expect(results.map((r) => r.status)).toEqual(['acquired', 'acquired', 'parked']);
    await first.close();
    (await open(2)).close();
    expect(await limitEvents()).toEqual([[2, 'config']]);
    const third = await open(3);
    expect(await limitEvents()).toEqual([[2, 'config'], [3, 'config']]);
    await until(() => statusIn('qc:repo-3', 'qc-3'), (s) => s === 'holding', 'the raised cap admits the parked build');
    await third.close();
  });

  it('refuses a bad cap naming the field, before opening anything', async () => {
    await expect(createLedger({ pool: db.pool, migrate: false, logger: silentLogger, queues: { builds: { maxConcurrent: 0 } } })).rejects.toMatchObject({ field: 'queues.builds.maxConcurrent' });
    await expect(createLedger({ pool: db.pool, migrate: false, logger: silentLogger, queues: { 'no spaces': { maxConcurrent: 1 } } })).rejects.toMatchObject({ field: 'queues.no spaces' });
  });
});

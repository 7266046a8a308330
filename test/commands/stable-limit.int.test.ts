import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { defineJob } from '../../src/adapters/worker/define-job.js';
import { LimitConflictError } from '../../src/domain/errors.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// Issue 11, "a key's limit is stable" (velocious keeps the first cap registered): two job types
// sharing a key used to flip its limit back and forth, each enqueue silently changing it.

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

describe('a key keeps the limit its first enqueue set', () => {
  it('regression: an enqueue naming another limit is refused with the key, its limit and the one asked for, and nothing is written', async () => {
    await ledger.enqueue({ name: 'sync', key: 'tenant:flip', limit: 2, jobId: 'flip-1' });
    const before = await eventCount();
    const refused = await ledger.enqueue({ name: 'export', key: 'tenant:flip', limit: 5, jobId: 'flip-2' }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LimitConflictError);
    expect(refused).toMatchObject({ key: 'tenant:flip', recorded: 2, requested: 5 });
    expect((refused as Error).message).toContain('"tenant:flip" has limit 2, not 5');
    expect(await eventCount()).toBe(before);
    expect((await ledger.keyState('tenant:flip')).state.limit).toBe(2);
  });

  it('a batch over several keys with one conflicting key writes nothing at all, not even the other keys\' jobs', async () => {
    await ledger.enqueue({ name: 'sync', key: 'tenant:batch-a', limit: 1, jobId: 'batch-a-0' });
    const before = await eventCount();
    const refused = await ledger
      .enqueueMany([
        { name: 'sync', key: 'tenant:batch-b', limit: 3, jobId: 'batch-b-1' },
        { name: 'sync', key: 'tenant:batch-a', limit: 4, jobId: 'batch-a-1' },
        { name: 'sync', key: 'tenant:batch-c', jobId: 'batch-c-1' },
      ])
      .catch((e: unknown) => e);
    expect(refused).toMatchObject({ name: 'LimitConflictError', key: 'tenant:batch-a', recorded: 1, requested: 4 });
    expect(await eventCount()).toBe(before);
    expect(await ledger.store.readStream(keyStream('tenant:batch-b'))).toEqual([]);
  });

  it('an enqueue with the same limit, or none, goes in as usual', async () => {
    await ledger.enqueue({ name: 'sync', key: 'tenant:same', limit: 3, jobId: 'same-1' });
    expect((await ledger.enqueue({ name: 'sync', key: 'tenant:same', limit: 3, jobId: 'same-2' })).status).toBe('acquired');
    expect((await ledger.enqueue({ name: 'sync', key: 'tenant:same', jobId: 'same-3' })).status).toBe('acquired');
  });

  it('a job definition that owns the limit changes it (a raise promotes the parked at once); ledger.setLimit changes it too', async () => {
    await ledger.enqueue({ name: 'sync', key: 'tenant:owned', limit: 1, jobId: 'owned-1' });
    await ledger.enqueue({ name: 'sync', key: 'tenant:owned', jobId: 'owned-2' });
    const reindex = defineJob<{ tenant: string }>({ name: 'reindex', key: (a) => `tenant:${a.tenant}`, limit: 3, ownsLimit: true, handler: async () => undefined });
    expect((await ledger.enqueue(reindex, { tenant: 'owned' }, { jobId: 'owned-3' })).status).toBe('acquired');
    const { state } = await ledger.keyState('tenant:owned');
    expect(state.limit).toBe(3);
    expect(state.jobs['owned-2']?.status).toBe('holding');
    await ledger.setLimit({ key: 'tenant:owned', limit: 1, by: 'ops' });
    expect((await ledger.keyState('tenant:owned')).state.limit).toBe(1);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { defineJob } from '../../src/adapters/worker/define-job.js';
import { LimitConflictError, RefusedError, UnknownKeyError } from '../../src/domain/errors.js';
import { holders, jobsIn } from '../../src/domain/key-state.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// Issue 11's rules of a key, through the ledger on real PostgreSQL:
// - a key's limit is stable (velocious keeps the first cap registered): two job types sharing a
//   key used to flip its limit back and forth, each enqueue silently changing it;
// - pausing a key (BullMQ Pro's pauseGroup): while paused nothing new is admitted on it, holders
//   finish, parked jobs keep their order; both are events with who and why;
// - what a job does when its key is full (Hatchet, pgbus): park, reject, or replace (a debounce).

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

const startAndComplete = async (key: string, jobId: string) => {
  const holder = holders((await ledger.keyState(key)).state).find((h) => h.jobId === jobId)!;
  const stream = keyStream(key);
  await ledger.execute(stream, { type: 'Start', jobId, leaseId: holder.lease!.leaseId, workerId: 'w' });
  return ledger.execute(stream, { type: 'Complete', jobId, leaseId: holder.lease!.leaseId });
};

describe('pause and resume a key', () => {
  it('while paused: new jobs park though slots are free, a holder finishes and its slot goes to no one; resume promotes in order', async () => {
    const key = 'tenant:paused';
    await ledger.enqueue({ name: 'sync', key, limit: 2, jobId: 'p-1' });
    expect(await ledger.pause({ key, by: 'alice', reason: 'vendor outage' })).toEqual({ paused: true });
    expect((await ledger.enqueue({ name: 'sync', key, jobId: 'p-2' })).status).toBe('parked');
    expect((await ledger.enqueue({ name: 'sync', key, jobId: 'p-3', priority: -1 })).status).toBe('parked');
    await startAndComplete(key, 'p-1');
    const { state } = await ledger.keyState(key);
    expect(holders(state)).toEqual([]);
    expect(state.paused).toMatchObject({ by: 'alice', reason: 'vendor outage' });

    const row = (await ledger.keys()).find((k) => k.key === key)!;
    expect(row).toMatchObject({ inUse: 0, parked: 2, paused: { by: 'alice', reason: 'vendor outage' } });
    expect((await ledger.keyDetail(key))?.paused).toMatchObject({ by: 'alice' });

    // p-3 has the lower priority number: it goes first, then p-2 (limit 2).
    expect(await ledger.resume({ key, by: 'bob', reason: 'vendor back' })).toEqual({ promoted: ['p-3', 'p-2'] });
    const after = await ledger.keyState(key);
    expect(after.state.paused).toBeUndefined();
    expect(jobsIn(after.state, 'parked')).toEqual([]);
    expect((await ledger.keys()).find((k) => k.key === key)?.paused).toBeNull();

    const events = (await ledger.audit({ key })).events.filter((e) => e.type === 'KeyPaused' || e.type === 'KeyResumed');
    expect(events.map((e) => [e.type, (e.data as { by: string }).by, (e.data as { reason: string | null }).reason])).toEqual([
      ['KeyPaused', 'alice', 'vendor outage'],
      ['KeyResumed', 'bob', 'vendor back'],
    ]);
  });

  it('pausing a paused key and resuming a running one are refused and write nothing; an unknown key is not created', async () => {
    const key = 'tenant:twice';
    await ledger.enqueue({ name: 'sync', key, jobId: 't-1' });
    await ledger.pause({ key, by: 'alice' });
    const before = (await ledger.store.readStream(keyStream(key))).length;
    await expect(ledger.pause({ key, by: 'bob' })).rejects.toThrow(RefusedError);
    await ledger.resume({ key, by: 'alice' });
    await expect(ledger.resume({ key, by: 'bob' })).rejects.toThrow('not paused');
    expect((await ledger.store.readStream(keyStream(key))).length).toBe(before + 1);
    await expect(ledger.pause({ key: 'tenant:nobody', by: 'alice' })).rejects.toThrow(UnknownKeyError);
    expect(await ledger.store.readStream(keyStream('tenant:nobody'))).toEqual([]);
  });
});

describe('whenFull: what a job does when its key is full at enqueue', () => {
  const finish = async (jobId: string) =>
    (await db.pool.query<{ status: string; finish_reason: string | null }>('SELECT status, finish_reason FROM jl_jobs WHERE job_id = $1', [jobId])).rows[0];

  it('reject: the enqueue answers "rejected", the ledger records JobRejected, the job is discarded with why and never holds a slot', async () => {
    const key = 'api:rejecting';
    await ledger.enqueue({ name: 'call', key, limit: 1, jobId: 'rj-1' });
    expect((await ledger.enqueue({ name: 'call', key, jobId: 'rj-2', whenFull: 'reject' })).status).toBe('rejected');
    expect(await finish('rj-2')).toEqual({ status: 'discarded', finish_reason: 'rejected: key full (limit 1)' });
    expect((await ledger.audit({ jobId: 'rj-2' })).events.map((e) => e.type)).toEqual(['JobEnqueued', 'JobRejected']);
    expect((await ledger.keyState(key)).state.jobs['rj-2']).toBeUndefined();
  });

  it('replace: a newer job of the same name parks in place of the parked ones (a trailing debounce); other names keep their place', async () => {
    const key = 'tenant:debounced';
    const reindex = defineJob<{ n: number }>({ name: 'reindex', key: () => key, limit: 1, whenFull: 'replace', handler: async () => undefined });
    await ledger.enqueue({ name: 'sync', key, limit: 1, jobId: 'db-holder' });
    expect((await ledger.enqueue(reindex, { n: 1 }, { jobId: 'db-1' })).status).toBe('parked');
    await ledger.enqueue({ name: 'sync', key, jobId: 'db-other' });
    expect((await ledger.enqueue(reindex, { n: 2 }, { jobId: 'db-2' })).status).toBe('parked');
    expect((await ledger.keyDetail(key))?.parked.map((p) => p.jobId)).toEqual(['db-other', 'db-2']);
    expect(await finish('db-1')).toEqual({ status: 'discarded', finish_reason: 'replaced by db-2' });
  });

  it('a job without a key cannot have a policy: refused naming whenFull, nothing written', async () => {
    await expect(ledger.enqueue({ name: 'solo', whenFull: 'reject' })).rejects.toThrow(/whenFull/);
  });
});

describe("a key's lease", () => {
  it("issue 21 #8: the first enqueue's lease is the key's (measured before: KeyLimitSet leaseMs 30000, later jobs 30 s); a later enqueue's lease is its job's alone; set-limit changes the key's; each holder shows its own", async () => {
    const key = 'lease:first';
    await ledger.enqueue({ name: 'sync', key, limit: 3, leaseMs: 120_000, jobId: 'lf-1' });
    await ledger.enqueue({ name: 'sync', key, jobId: 'lf-2' });
    await ledger.enqueue({ name: 'sync', key, leaseMs: 600_000, jobId: 'lf-3' });
    const events = await ledger.store.readStream(keyStream(key));
    expect(events.filter((e) => e.type === 'KeyLimitSet').map((e) => e.data.leaseMs)).toEqual([120_000]);
    expect(events.filter((e) => e.type === 'JobEnqueued').map((e) => [e.data.jobId, e.data.leaseMs])).toEqual([
      ['lf-1', 120_000],
      ['lf-2', 120_000],
      ['lf-3', 600_000],
    ]);
    const detail = await ledger.keyDetail(key);
    expect(detail?.leaseMs).toBe(120_000);
    expect(detail?.holders.map((h) => [h.jobId, h.leaseMs])).toEqual([
      ['lf-1', 120_000],
      ['lf-2', 120_000],
      ['lf-3', 600_000],
    ]);
    await ledger.setLimit({ key, limit: 3, leaseMs: 60_000, by: 'ops' });
    await ledger.enqueue({ name: 'sync', key, jobId: 'lf-4' });
    expect((await ledger.keyState(key)).state.jobs['lf-4']?.leaseMs).toBe(60_000);
  });
});

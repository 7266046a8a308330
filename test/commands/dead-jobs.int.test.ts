import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { RefusedError, UnknownJobError, UnknownKeyError } from '../../src/domain/errors.js';
import { parkedInOrder } from '../../src/domain/key-state.js';
import { ValidationError } from '../../src/domain/values.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { verify } from '../../src/projections/verify.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';

// Dead jobs on a real ledger: a retry brings one back (its read-model row too), admitted like an
// arrival; a discard takes it off the failed list; a bad or refused action writes nothing; and
// the explainer and the job's history read it all back from the ledger.

let s: ScriptedLedger;

beforeAll(async () => {
  s = await openScriptedLedger();
});

afterAll(async () => {
  await s?.close();
});

/** A job on `key` that ran once and died (maxAttempts 1), with `error`. */
const dies = async (key: string, jobId: string, options: { limit?: number; limits?: { key: string; limit?: number }[]; error?: string } = {}) => {
  await s.ledger.enqueue({ name: 'work', key, limit: options.limit ?? 1, jobId, maxAttempts: 1, ...(options.limits ? { limits: options.limits } : {}) });
  await s.start(key, jobId);
  await s.fail(key, jobId, options.error ?? 'boom');
};

const row = async (jobId: string) =>
  (await s.db.pool.query('SELECT status, attempts, finished_at, finish_reason, last_error FROM jl_jobs WHERE job_id = $1', [jobId])).rows[0];

const refusedWithNothingWritten = async (action: () => Promise<unknown>, error: unknown) => {
  const before = await s.eventCount();
  await expect(action()).rejects.toThrow(error as Error);
  expect(await s.eventCount()).toBe(before);
};

describe('retry', () => {
  it('a dead job parks at the back of a full line with a fresh set of attempts, recorded with who; it runs when its turn comes', async () => {
    s.at(T0);
    await dies('mail', 'd1');
    await s.ledger.enqueue({ name: 'work', key: 'mail', jobId: 'h' });
    await s.ledger.enqueue({ name: 'work', key: 'mail', jobId: 'p' });
    expect(await row('d1')).toMatchObject({ status: 'dead', attempts: 1, last_error: 'boom' });
    s.at(T0 + 10 * SEC);
    expect(await s.ledger.retry({ jobIds: ['d1'], by: 'alice' }, { via: 'test' })).toEqual({ retried: [{ jobId: 'd1', status: 'parked' }] });
    const { state } = await s.ledger.keyState('mail');
    expect(parkedInOrder(state).map((j) => j.jobId)).toEqual(['p', 'd1']);
    expect(state.jobs.d1).toMatchObject({ attempts: 0, maxAttempts: 1 });
    // The read models follow: parked, attempts reset, unfinished, in the same order as the state.
    expect(await row('d1')).toMatchObject({ status: 'parked', attempts: 0, finished_at: null, finish_reason: null, last_error: 'boom' });
    expect((await s.db.pool.query(`SELECT job_id FROM jl_parked WHERE key = 'mail' ORDER BY priority, seq`)).rows.map((r) => r.job_id)).toEqual(['p', 'd1']);
    const audit = await s.ledger.audit({ jobId: 'd1' });
    expect(audit.eventsInWords).toContain('dead job d1 retried by alice: 1 fresh attempt, priority 0');
    await s.start('mail', 'h');
    await s.complete('mail', 'h');
    await s.start('mail', 'p');
    await s.complete('mail', 'p');
    expect(await row('d1')).toMatchObject({ status: 'holding', attempts: 0 });
    await s.start('mail', 'd1');
    await s.complete('mail', 'd1');
    expect(await row('d1')).toMatchObject({ status: 'completed', attempts: 1 });
    expect((await verify(s.db.pool, createReadModelProjections())).differences).toEqual([]);
  });

  it('refuses a job that is not dead, or unknown, naming it, and writes nothing', async () => {
    s.at(T0);
    await s.ledger.enqueue({ name: 'work', key: 'busy', jobId: 'b1' });
    await refusedWithNothingWritten(() => s.ledger.retry({ jobIds: ['b1'], by: 'alice' }), RefusedError);
    await expect(s.ledger.retry({ jobIds: ['b1'], by: 'alice' })).rejects.toThrow('job b1 is holding, not dead');
    await refusedWithNothingWritten(() => s.ledger.retry({ jobIds: ['nobody'], by: 'alice' }), UnknownJobError);
    // All or nothing: a dead job named beside one that is not is not retried either.
    await dies('busy2', 'b2');
    await refusedWithNothingWritten(() => s.ledger.retry({ jobIds: ['b2', 'b1'], by: 'alice' }), RefusedError);
    expect(await row('b2')).toMatchObject({ status: 'dead' });
    await refusedWithNothingWritten(() => s.ledger.retry({ key: 'no such key', by: 'alice' }), UnknownKeyError);
  });

  it.each([
    [{ jobIds: [], by: 'a' }, 'jobIds'],
    [{ jobIds: [' '], by: 'a' }, 'jobIds[0]'],
    [{ jobIds: ['x'], key: 'k', by: 'a' }, 'jobIds'],
    [{ by: 'a' }, 'jobIds'],
    [{ jobIds: ['b2'], by: ' ' }, 'by'],
  ])('bad input %j names %s and writes nothing', async (input, field) => {
    const before = await s.eventCount();
    await expect(s.ledger.retry(input as never)).rejects.toMatchObject({ name: 'ValidationError', field });
    await expect(s.ledger.discardDead(input as never)).rejects.toBeInstanceOf(ValidationError);
    expect(await s.eventCount()).toBe(before);
  });

  it('every dead job of a key: the first takes the free slot, the rest park (never over the limit)', async () => {
    s.at(T0);
    await dies('rk', 'r1');
    await dies('rk', 'r2');
    const { retried } = await s.ledger.retry({ key: 'rk', by: 'bob' });
    expect(retried.map((r) => r.status).sort()).toEqual(['acquired', 'parked']);
    expect((await s.ledger.keyState('rk')).state.holding).toBe(1);
    // The admission is dispatched as the job's first attempt again.
    const admitted = retried.find((r) => r.status === 'acquired')!.jobId;
    const { rows } = await s.db.pool.query(`SELECT status, attempts + 1 AS attempt FROM jl_jobs WHERE job_id = $1`, [admitted]);
    expect(rows[0]).toEqual({ status: 'holding', attempt: 1 });
  });

  it('a job under a further limit is retried across its limit key: it waits there while the limit is full', async () => {
    s.at(T0);
    await dies('lk', 'l1', { limit: 2, limits: [{ key: 'api', limit: 1 }] });
    await s.ledger.enqueue({ name: 'work', key: 'lk2', jobId: 'other', limits: [{ key: 'api' }] });
    s.at(T0 + 5 * SEC);
    expect(await s.ledger.retry({ jobIds: ['l1'], by: 'carol' })).toEqual({ retried: [{ jobId: 'l1', status: 'parked' }] });
    const x = await s.ledger.explain({ jobId: 'l1' });
    expect(x).toMatchObject({ status: 'parked', waits: [{ kind: 'parked', on: [{ key: 'api', why: 'full' }] }] });
    expect(x.limits.map((l) => [l.key, l.blocking])).toEqual([['lk', false], ['api', true]]);
    expect(x.limits[1]!.holders).toMatchObject([{ jobId: 'other', home: 'lk2' }]);
    s.at(T0 + 8 * SEC);
    await s.start('lk2', 'other');
    await s.complete('lk2', 'other');
    await s.ledger.drain();
    expect((await s.ledger.explain({ jobId: 'l1' })).status).toBe('holding');
    // Its own view: its events at home and on the limit key, in order, with who.
    const history = await s.ledger.jobHistory({ jobId: 'l1' });
    const types = history.events.map((e) => `${e.stream} ${e.type}`);
    // The promotion was decided from api's line (other's release freed it): api's append came first.
    expect(types.slice(-5)).toEqual(['key:lk JobRetried', 'key:lk JobParked', 'key:api LimitWaiting', 'key:api LimitHeld', 'key:lk JobPromoted']);
    expect(history.events.find((e) => e.type === 'JobRetried')).toMatchObject({ by: 'carol', at: T0 + 5 * SEC });
    expect(history.events.find((e) => e.type === 'JobFailed')).toMatchObject({ why: 'boom' });
    expect(history.events.find((e) => e.type === 'JobStarted')).toMatchObject({ workerId: 'w1', inWords: expect.stringContaining('worker w1 started job l1') });
    expect((await s.ledger.audit({ jobId: 'l1' })).handoffs.map((h) => `${h.key} ${h.leaseId}`)).toEqual(['lk l1:1', 'lk l1:2', 'api l1:1', 'api l1:2']);
  });
});

describe('discardDead', () => {
  it('takes dead jobs off the failed list for good, recorded with who; they are no longer dead', async () => {
    s.at(T0);
    await dies('dd', 'x1');
    await dies('dd', 'x2');
    expect((await s.ledger.jobs({ key: 'dd', status: 'dead' })).jobs.map((j) => j.jobId).sort()).toEqual(['x1', 'x2']);
    expect((await s.ledger.discardDead({ key: 'dd', by: 'bob' })).discarded.sort()).toEqual(['x1', 'x2']);
    expect((await s.ledger.jobs({ key: 'dd', status: 'dead' })).jobs).toEqual([]);
    expect(await row('x1')).toMatchObject({ status: 'discarded', finish_reason: 'dead, then discarded by bob', last_error: 'boom' });
    await refusedWithNothingWritten(() => s.ledger.retry({ jobIds: ['x1'], by: 'bob' }), 'job x1 is discarded, not dead');
    expect(await s.ledger.discardDead({ key: 'dd', by: 'bob' })).toEqual({ discarded: [] });
    expect((await verify(s.db.pool, createReadModelProjections())).differences).toEqual([]);
  });
});

describe('explain and the jobs list', () => {
  it('as of a past moment and now: parked behind a holder, then how it ended and how long it waited', async () => {
    s.at(T0);
    await s.ledger.enqueue({ name: 'work', key: 'ex', jobId: 'e1' });
    await s.start('ex', 'e1', 'wk');
    s.at(T0 + SEC);
    await s.ledger.enqueue({ name: 'work', key: 'ex', jobId: 'e2' });
    s.at(T0 + 4 * SEC);
    await s.complete('ex', 'e1');
    await s.start('ex', 'e2');
    await s.complete('ex', 'e2');
    const then = await s.ledger.explain({ jobId: 'e2', at: new Date(T0 + 2 * SEC).toISOString() });
    expect(then).toMatchObject({ status: 'parked', asOf: T0 + 2 * SEC, limits: [{ key: 'ex', place: { n: 1, of: 1 }, holders: [{ jobId: 'e1', lease: { state: 'running', workerId: 'wk', startedAt: T0 } }] }] });
    const now = await s.ledger.explain({ jobId: 'e2' });
    expect(now).toMatchObject({ status: 'completed', waits: [{ kind: 'parked', from: T0 + SEC, until: T0 + 4 * SEC, ms: 3 * SEC }], waited: { parkedMs: 3 * SEC } });
    await expect(s.ledger.explain({ jobId: 'e2', at: 'yesterday' })).rejects.toMatchObject({ name: 'ValidationError', field: 'at' });
    await expect(s.ledger.explain({ jobId: 'nobody' })).rejects.toThrow(UnknownJobError);
  });

  it('lists failed jobs (waiting for their retry) and filters by name and queue', async () => {
    s.at(T0);
    await s.ledger.enqueue({ name: 'flaky', key: 'fl', jobId: 'f1', queue: 'slow', maxAttempts: 3 });
    await s.start('fl', 'f1');
    await s.fail('fl', 'f1', 'timeout');
    const failed = (await s.ledger.jobs({ status: 'failed', name: 'flaky', queue: 'slow' })).jobs;
    expect(failed).toEqual([expect.objectContaining({ jobId: 'f1', status: 'scheduled', attempts: 1, maxAttempts: 3, lastError: 'timeout' })]);
    expect((await s.ledger.jobs({ status: 'failed', queue: 'default' })).jobs.map((j) => j.jobId)).not.toContain('f1');
    await expect(s.ledger.jobs({ status: 'broken' as never })).rejects.toMatchObject({ field: 'status' });
    await expect(s.ledger.jobs({ queue: 'no spaces' })).rejects.toMatchObject({ field: 'queue' });
  });
});

describe('issue 21 #5: a discard and a retry of one dead job race', () => {
  it('from two processes at once, 12 times: exactly one of them lands, the other is refused, and a discarded job never runs', async () => {
    // Another process: its own pool, key writer and cache (as `jobledger retry` beside `serve`).
    const pool = new pg.Pool({ connectionString: s.db.url, max: 4, pipeline: true } as pg.PoolConfig);
    pool.on('error', () => undefined);
    const other = await createLedger({ pool, migrate: false, logger: silentLogger, clock: () => T0 + 60 * SEC });
    try {
      for (let i = 0; i < 12; i++) {
        const jobId = `race-${i}`;
        await dies(`race-${i}`, jobId);
        // Measured before the fix: both landed in 9 of 12 tries (JobDead, DeadDiscarded, JobRetried, SlotAcquired).
        const [retried, discarded] = await Promise.allSettled([s.ledger.retry({ jobIds: [jobId], by: 'alice' }), other.discardDead({ jobIds: [jobId], by: 'bob' })]);
        expect([retried.status, discarded.status].sort(), jobId).toEqual(['fulfilled', 'rejected']);
        const loser = retried.status === 'rejected' ? retried : (discarded as PromiseRejectedResult);
        expect(loser.reason).toBeInstanceOf(RefusedError);
        const types = (await s.ledger.audit({ jobId })).events.map((e) => e.type);
        expect(types.includes('JobRetried') && types.includes('DeadDiscarded'), `${jobId}: ${types.join(', ')}`).toBe(false);
      }
    } finally {
      await other.close();
      await pool.end();
    }
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { JobRow } from '../../../../src/adapters/postgres/queries/list-jobs.js';
import { Presence } from '../../../../src/adapters/worker/presence.js';
import { silentLogger } from '../../../../src/domain/ports/logger.js';
import { noOutages } from '../../../../src/domain/ports/outages.js';
import { ValidationError } from '../../../../src/domain/values.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../../../support/ledger.js';

// keys(), keyDetail() and jobs() over the read models a scripted run left, with the ledger's clock.

/** worker-z's presence row, as its worker would write it; stop() leaves it gone. */
const presenceOf = (id: string) => new Presence(s.db.pool, noOutages, silentLogger, { id, queue: 'default', concurrency: 1, intervalMs: 60_000 }, () => 1);

let s: ScriptedLedger;

beforeAll(async () => {
  s = await openScriptedLedger();
  const { ledger } = s;
  // busy: limit 2; b1 runs and completes, b4 (the smallest priority) is promoted; two stay parked, one is scheduled.
  s.at(T0);
  await ledger.enqueue({ name: 'sync', key: 'busy', limit: 2, jobId: 'b1' });
  await ledger.enqueue({ name: 'sync', key: 'busy', jobId: 'b2' });
  s.at(T0 + SEC);
  await ledger.enqueue({ name: 'sync', key: 'busy', jobId: 'b3', priority: 5 });
  s.at(T0 + 2 * SEC);
  await ledger.enqueue({ name: 'report', key: 'busy', jobId: 'b4', priority: 1 });
  await ledger.enqueue({ name: 'sync', key: 'busy', jobId: 'b5', priority: 3 });
  await ledger.enqueue({ name: 'later', key: 'busy', jobId: 'b6', delayMs: 60 * SEC });
  s.at(T0 + 3 * SEC);
  await s.start('busy', 'b1', 'worker-a');
  s.at(T0 + 4 * SEC);
  await s.complete('busy', 'b1'); // b4 (priority 1) is promoted ahead of b3 and b5
  // idle: a key whose only job finished; stale: a started holder whose lease runs out (clock moves past it).
  s.at(T0 + 5 * SEC);
  await ledger.enqueue({ name: 'sync', key: 'idle', jobId: 'i1' });
  await s.start('idle', 'i1');
  await s.complete('idle', 'i1');
  await ledger.enqueue({ name: 'sync', key: 'stale', leaseMs: 2 * SEC, jobId: 's1' });
  await s.start('stale', 's1', 'worker-z');
  await ledger.enqueue({ name: 'solo', jobId: 'u1' });
});

afterAll(async () => {
  await s?.close();
});

describe('keys()', () => {
  it('every key with limit, use, waits and lease state by the ledger clock', async () => {
    s.at(T0 + 6 * SEC);
    const none = { running: 0, unstarted: 0, expired: 0, workerGone: 0 };
    expect(await s.ledger.keys()).toEqual([
      // b2 and b4 hold their slots unstarted: no expiry (issue 9: a backlog nobody has read costs nothing).
      { key: 'busy', limit: 2, inUse: 2, parked: 2, scheduled: 1, oldestParkedAt: T0 + SEC, nextLeaseExpiry: null, leaseState: 'unstarted', holderStates: { ...none, unstarted: 2 }, oldestUnstartedAt: T0, atLimit: true, quarantine: null, paused: null },
      { key: 'idle', limit: 1, inUse: 0, parked: 0, scheduled: 0, oldestParkedAt: null, nextLeaseExpiry: null, leaseState: 'none', holderStates: none, oldestUnstartedAt: null, atLimit: false, quarantine: null, paused: null },
      // worker-z never announced itself: its lease is unexpired, but no live worker runs it (issue 12: never "live").
      { key: 'stale', limit: 1, inUse: 1, parked: 0, scheduled: 0, oldestParkedAt: null, nextLeaseExpiry: T0 + 7 * SEC, leaseState: 'worker-gone', holderStates: { ...none, workerGone: 1 }, oldestUnstartedAt: null, atLimit: true, quarantine: null, paused: null },
    ]);
    const presence = presenceOf('worker-z');
    await presence.start();
    expect((await s.ledger.keys()).find((k) => k.key === 'stale')).toMatchObject({ leaseState: 'live', holderStates: { ...none, running: 1 } });
    await presence.stop();
    expect((await s.ledger.keys()).find((k) => k.key === 'stale')).toMatchObject({ leaseState: 'worker-gone', holderStates: { ...none, workerGone: 1 } });
    s.at(T0 + 7 * SEC);
    expect((await s.ledger.keys()).find((k) => k.key === 'stale')).toMatchObject({ leaseState: 'expired', holderStates: { ...none, expired: 1 } });
  });
});

describe('keyDetail()', () => {
  it('holders with how they got the slot, parked jobs in promotion order, scheduled jobs', async () => {
    s.at(T0 + 31 * SEC);
    expect(await s.ledger.keyDetail('busy')).toEqual({
      key: 'busy',
      limit: 2,
      leaseMs: 30 * SEC,
      holders: [
        { jobId: 'b2', name: 'sync', leaseId: 'b2:2', how: 'acquired', acquiredAt: T0, expiresAt: null, workerId: null, startedAt: null, attempt: null, state: 'unstarted', leaseState: 'unstarted', renewedAt: null, workerLastSeen: null, home: null, limits: [], leaseMs: 30_000, revoked: null },
        { jobId: 'b4', name: 'report', leaseId: 'b4:3', how: 'promoted', acquiredAt: T0 + 4 * SEC, expiresAt: null, workerId: null, startedAt: null, attempt: null, state: 'unstarted', leaseState: 'unstarted', renewedAt: null, workerLastSeen: null, home: null, limits: [], leaseMs: 30_000, revoked: null },
      ],
      parked: [
        { jobId: 'b5', name: 'sync', priority: 3, parkedAt: T0 + 2 * SEC, home: null, limits: [], waitsOn: [] },
        { jobId: 'b3', name: 'sync', priority: 5, parkedAt: T0 + SEC, home: null, limits: [], waitsOn: [] },
      ],
      scheduled: [{ jobId: 'b6', name: 'later', runAt: T0 + 62 * SEC, attempts: 0 }],
      counts: { holders: 2, ownHolders: 2, parked: 2, ownParked: 2, scheduled: 1 },
      listed: 100,
      quarantine: null,
      paused: null,
    });
  });

  it('each list holds its first `listed` jobs, in its order, and counts them all', async () => {
    s.at(T0 + 31 * SEC);
    const whole = (await s.ledger.keyDetail('busy'))!;
    const cut = (await s.ledger.keyDetail('busy', undefined, 1))!;
    expect(cut.holders).toEqual(whole.holders.slice(0, 1));
    expect(cut.parked).toEqual(whole.parked.slice(0, 1));
    expect(cut.scheduled).toEqual(whole.scheduled);
    expect(cut.counts).toEqual(whole.counts);
    expect(cut.listed).toBe(1);
  });

  it('a list size out of range is refused naming `limit`', async () => {
    for (const listed of [0, 1001, 1.5]) await expect(s.ledger.keyDetail('busy', undefined, listed)).rejects.toThrow(/limit/);
  });

  it('a started holder shows its worker, start, attempt, renewal and lease: running while its worker is live, worker gone once it stopped, expired by the ledger clock', async () => {
    const holder = { jobId: 's1', name: 'sync', leaseId: 's1:1', how: 'acquired', acquiredAt: T0 + 5 * SEC, expiresAt: T0 + 7 * SEC, workerId: 'worker-z', startedAt: T0 + 5 * SEC, attempt: 1, renewedAt: T0 + 5 * SEC, home: null, limits: [], leaseMs: 2_000, revoked: null };
    s.at(T0 + 6 * SEC);
    const presence = presenceOf('worker-z');
    await presence.start();
    expect((await s.ledger.keyDetail('stale'))?.holders).toEqual([{ ...holder, state: 'running', leaseState: 'live', workerLastSeen: expect.any(Number) }]);
    await presence.stop();
    expect((await s.ledger.keyDetail('stale'))?.holders).toEqual([{ ...holder, state: 'worker-gone', leaseState: 'worker-gone', workerLastSeen: expect.any(Number) }]);
    s.at(T0 + 7 * SEC);
    expect((await s.ledger.keyDetail('stale'))?.holders).toEqual([{ ...holder, state: 'expired', leaseState: 'expired', workerLastSeen: expect.any(Number) }]);
  });

  it('null for a key never seen; a bad key is a ValidationError naming key', async () => {
    expect(await s.ledger.keyDetail('nobody')).toBeNull();
    await expect(s.ledger.keyDetail('')).rejects.toThrow(ValidationError);
    await expect(s.ledger.keyDetail('  ')).rejects.toMatchObject({ field: 'key' });
  });
});

describe('jobs()', () => {
  const ids = (jobs: readonly JobRow[]) => jobs.map((j) => j.jobId);

  it('newest first, with status, attempts and timings', async () => {
    const page = await s.ledger.jobs();
    expect(ids(page.jobs)).toEqual(['u1', 's1', 'i1', 'b6', 'b5', 'b4', 'b3', 'b2', 'b1']);
    expect(page.nextCursor).toBeNull();
    expect(page.jobs.find((j) => j.jobId === 'b1')).toEqual({
      jobId: 'b1',
      key: 'busy',
      name: 'sync',
      queue: 'default',
      status: 'completed',
      attempts: 1,
      maxAttempts: 5,
      priority: 0,
      enqueuedAt: T0,
      runAt: null,
      startedAt: T0 + 3 * SEC,
      finishedAt: T0 + 4 * SEC,
      lastError: null,
      finishReason: null,
      workerId: 'worker-a',
    } satisfies JobRow);
    expect(page.jobs.find((j) => j.jobId === 'b6')).toMatchObject({ status: 'scheduled', runAt: T0 + 62 * SEC });
    expect(page.jobs.find((j) => j.jobId === 'u1')).toMatchObject({ key: null, status: 'holding' });
  });

  it('filters by key and status', async () => {
    expect(ids((await s.ledger.jobs({ key: 'busy', status: 'parked' })).jobs)).toEqual(['b5', 'b3']);
    expect(ids((await s.ledger.jobs({ status: 'completed' })).jobs)).toEqual(['i1', 'b1']);
    expect(ids((await s.ledger.jobs({ key: 'nobody' })).jobs)).toEqual([]);
  });

  it('pages with a keyset cursor through jobs enqueued at the same moment, each job once', async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 10; pages++) {
      const page = await s.ledger.jobs({ limit: 2, ...(cursor ? { cursor } : {}) });
      seen.push(...ids(page.jobs));
      if (page.nextCursor === null) break;
      cursor = page.nextCursor;
    }
    expect(seen).toEqual(['u1', 's1', 'i1', 'b6', 'b5', 'b4', 'b3', 'b2', 'b1']);
  });

  it.each([
    [{ limit: 0 }, 'limit'],
    [{ limit: 1001 }, 'limit'],
    [{ limit: 2.5 }, 'limit'],
    [{ status: 'sleeping' }, 'status'],
    [{ key: '' }, 'key'],
    [{ cursor: 'not-a-cursor' }, 'cursor'],
    [{ cursor: 42 }, 'cursor'],
  ])('a bad filter %j is a ValidationError naming %s', async (filter, field) => {
    await expect(s.ledger.jobs(filter as never)).rejects.toMatchObject({ name: 'ValidationError', field });
  });
});

describe('queues()', () => {
  it('regression (issue 25): a queue with a live consumer and nothing waiting has no oldest age (it said 0 ms), nor oldest time', async () => {
    const idle = new Presence(s.db.pool, noOutages, silentLogger, { id: 'worker-idle', queue: 'idle-queue', concurrency: 2, intervalMs: 60_000 }, () => 1);
    await idle.start();
    try {
      const row = (await s.ledger.queues()).find((q) => q.queue === 'idle-queue');
      expect(row).toEqual({ queue: 'idle-queue', depth: 0, visibleNow: 0, oldestAgeMs: null, oldestAt: null, consumers: 1, capacity: 2 });
    } finally {
      await idle.stop();
    }
  });
});

describe('keyPage()', () => {
  it('regression: a key two readers stopped at (the key writer and a projection) is one key of the page, of the totals and of its warning', async () => {
    s.at(T0 + 31 * SEC);
    const quarantine = (reader: string) =>
      s.db.pool.query(`INSERT INTO jl_quarantined (stream, reader, revision, position, commit_id, error) VALUES ('key:idle', $1, 3, 5, '99', 'does not decode')`, [reader]);
    await quarantine('writer');
    await quarantine('projection:read_models');
    try {
      const page = await s.ledger.keyPage({ unstartedAfterMs: 30 * SEC });
      expect(page.totals.keys).toBe((await s.ledger.keys()).length);
      expect(page.keys.filter((k) => k.key === 'idle')).toMatchObject([{ quarantine: { revision: 3, readers: ['projection:read_models', 'writer'] }, attention: ['key-quarantined'] }]);
      expect(page.attention.find((g) => g.cause === 'key-quarantined')).toEqual({ cause: 'key-quarantined', count: 1, holders: 0, since: null, first: [{ key: 'idle', count: 0, since: null }] });
    } finally {
      await s.db.pool.query(`DELETE FROM jl_quarantined WHERE stream = 'key:idle'`);
    }
  });
});

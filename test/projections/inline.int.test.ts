import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { claimStatement } from '../../src/adapters/queue/job-queue.js';
import { keyEventId } from '../../src/commands/enqueue.js';
import { KeyWriter } from '../../src/commands/key-writer.js';
import type { Command } from '../../src/domain/commands.js';
import { KeyEvent } from '../../src/domain/events.js';
import { holders } from '../../src/domain/key-state.js';
import { WrongExpectedRevisionError } from '../../src/domain/ports/event-store.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { LEASE_LOST_CHANNEL, createDispatcher } from '../../src/projections/dispatcher.js';
import { statement, type Projection } from '../../src/projections/projection.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { rebuild } from '../../src/projections/rebuild.js';
import { verify } from '../../src/projections/verify.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { count, eventsOf, expectClaimableMatchFold, expectReadModelsMatchFold, manualClock, randomRun, readModelRows, readModelView, waitFor } from './support.js';

let db: MigratedDatabase;
let ledger: Ledger;
const clock = manualClock();

beforeAll(async () => {
  // pipelined, like the ledger's own pool: a flush sends its statements together
  db = await createMigratedDatabase(30, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: clock.now, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

/**
 * Admissions nobody started nor released, counted in SQL on the events alone: what a worker's read
 * must be able to claim, one row each.
 */
const UNSTARTED_ADMISSIONS = `
  SELECT count(*) AS n FROM events a
  WHERE a.type IN ('SlotAcquired', 'JobPromoted')
    AND NOT EXISTS (
      SELECT 1 FROM events s WHERE s.type IN ('JobStarted', 'SlotReleased') AND s.stream = a.stream AND s.stream_revision > a.stream_revision AND s.data->>'leaseId' = a.data->>'leaseId')`;

const n = (sql: string, values: unknown[] = []) => count(db.pool, sql, values);

const ok = async (key: string, command: Command) => {
  const result = await ledger.execute(keyStream(key), command);
  if (E.isLeft(result)) throw new Error(`${command.type} refused: ${JSON.stringify(result.left)}`);
  return result.right;
};

/** What a worker's read of `queue` would claim now (CLAIM_SQL itself, in a transaction rolled back). */
const claimable = async (queue: string) => {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const claim = claimStatement({ queue, qty: 100, skipStreams: [], skipJobs: [] });
    return (await client.query(claim.text, claim.values as unknown[])).rows;
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
};

describe('inline projections (Ledger.open default)', () => {
  it('an enqueue writes the job\'s row (its slot, no expiry until started: the message a worker claims) and the key in the flush', async () => {
    const t0 = clock.now();
    expect(ledger.projectionMode).toBe('inline');
    await ledger.enqueue({ name: 'email', args: { to: 'a@b' }, key: 'basic', limit: 1, jobId: 'basic-1', queue: 'mail', priority: 2 });
    await ledger.enqueue({ name: 'email', args: { to: 'c@d' }, key: 'basic', jobId: 'basic-2', queue: 'mail' });
    const { rows: jobs } = await db.pool.query(`SELECT job_id, stream, key, seq, name, queue, args, priority, status, attempts, max_attempts, lease_ms, enqueued_at, run_at, lease_id FROM jl_jobs WHERE key = 'basic' ORDER BY seq`);
    expect(jobs).toEqual([
      { job_id: 'basic-1', stream: 'key:basic', key: 'basic', seq: '1', name: 'email', queue: 'mail', args: { to: 'a@b' }, priority: '2', status: 'holding', attempts: 0, max_attempts: 5, lease_ms: 30_000, enqueued_at: new Date(t0), run_at: null, lease_id: 'basic-1:1' },
      { job_id: 'basic-2', stream: 'key:basic', key: 'basic', seq: '3', name: 'email', queue: 'mail', args: { to: 'c@d' }, priority: '0', status: 'parked', attempts: 0, max_attempts: 5, lease_ms: 30_000, enqueued_at: new Date(t0), run_at: null, lease_id: null },
    ]);
    expect((await db.pool.query(`SELECT job_id, how, expires_at, worker_id FROM jl_slots WHERE key = 'basic'`)).rows).toEqual([{ job_id: 'basic-1', how: 'acquired', expires_at: null, worker_id: null }]);
    const stats = `SELECT key, concurrency_limit, in_use, parked, scheduled, oldest_parked_at, next_lease_expiry FROM jl_key_stats WHERE key = 'basic'`;
    expect((await db.pool.query(stats)).rows).toEqual([{ key: 'basic', concurrency_limit: 1, in_use: 1, parked: 1, scheduled: 0, oldest_parked_at: new Date(t0), next_lease_expiry: null }]);
    expect(await claimable('mail')).toEqual([{ jobId: 'basic-1', key: 'basic', stream: 'key:basic', leaseId: 'basic-1:1', name: 'email', args: { to: 'a@b' }, attempt: 1, leaseMs: 30_000 }]);

    // start: the lease now expires, nothing left to claim; complete: the slot goes to basic-2 in the same flush, claimable at once
    await ok('basic', { type: 'Start', jobId: 'basic-1', leaseId: 'basic-1:1', workerId: 'w1' });
    expect((await db.pool.query(stats)).rows[0].next_lease_expiry).toEqual(new Date(t0 + 30_000));
    expect(await claimable('mail')).toEqual([]);
    clock.advance(1_000);
    await ok('basic', { type: 'Complete', jobId: 'basic-1', leaseId: 'basic-1:1' });
    const { rows: after } = await db.pool.query(`SELECT job_id, status, attempts, worker_id, lease_id, finished_at FROM jl_jobs WHERE key = 'basic' ORDER BY seq`);
    expect(after).toEqual([
      { job_id: 'basic-1', status: 'completed', attempts: 1, worker_id: 'w1', lease_id: null, finished_at: new Date(t0 + 1_000) },
      { job_id: 'basic-2', status: 'holding', attempts: 0, worker_id: null, lease_id: 'basic-2:2', finished_at: null },
    ]);
    expect((await db.pool.query(`SELECT job_id, how, expires_at FROM jl_slots WHERE key = 'basic'`)).rows).toEqual([{ job_id: 'basic-2', how: 'promoted', expires_at: null }]);
    expect(await n(`SELECT count(*) AS n FROM jl_parked WHERE key = 'basic'`)).toBe(0);
    expect((await claimable('mail')).map((m) => m.leaseId)).toEqual(['basic-2:2']);
    await expectReadModelsMatchFold(db.pool, [keyStream('basic')]);
  });

  it('a started job is no longer claimable; its renewals move the expiry on its row, and its release frees the row, in the same flush', async () => {
    await ledger.enqueue({ name: 'long', key: 'follow', jobId: 'follow-1', queue: 'follow', leaseMs: 12_000 });
    const [claimed] = await claimable('follow');
    expect(claimed).toMatchObject({ leaseId: 'follow-1:1', leaseMs: 12_000 });
    const started = await ok('follow', { type: 'Start', jobId: 'follow-1', leaseId: 'follow-1:1', workerId: 'w1' });
    // No message id in the events any more: the job's row is its message.
    expect(started.events).toEqual([expect.objectContaining({ type: 'JobStarted', data: expect.not.objectContaining({ msgId: expect.anything() }) })]);
    expect(await claimable('follow')).toEqual([]);
    clock.advance(4_000);
    await ok('follow', { type: 'Renew', jobId: 'follow-1', leaseId: 'follow-1:1' });
    const row = async () => (await db.pool.query(`SELECT status, lease_id, expires_at FROM jl_jobs WHERE job_id = 'follow-1'`)).rows[0];
    expect(await row()).toEqual({ status: 'running', lease_id: 'follow-1:1', expires_at: new Date(clock.now() + 12_000) });
    await ok('follow', { type: 'Complete', jobId: 'follow-1', leaseId: 'follow-1:1' });
    expect(await row()).toEqual({ status: 'completed', lease_id: null, expires_at: null });
    expect(await claimable('follow')).toEqual([]);
  });

  it('a direct handoff starts the promoted job in the completing flush: never claimable, and the flush returns its name and args', async () => {
    await ledger.enqueueMany([
      { name: 'first', key: 'handoff', limit: 1, jobId: 'ho-1', queue: 'ho' },
      { name: 'second', args: { page: 2 }, key: 'handoff', jobId: 'ho-2', queue: 'ho' },
    ]);
    await ok('handoff', { type: 'Start', jobId: 'ho-1', leaseId: 'ho-1:1', workerId: 'w1' });
    const done = await ok('handoff', { type: 'Complete', jobId: 'ho-1', leaseId: 'ho-1:1', handOffTo: { workerId: 'w1', queue: 'ho' } });
    expect(done.events.map((e) => e.type)).toEqual(['JobCompleted', 'SlotReleased', 'JobPromoted', 'JobStarted']);
    expect(done.handedOff).toEqual([{ jobId: 'ho-2', key: 'handoff', name: 'second', args: { page: 2 } }]);
    expect(await claimable('ho')).toEqual([]);
    expect((await db.pool.query(`SELECT status, attempts, worker_id FROM jl_jobs WHERE job_id = 'ho-2'`)).rows).toEqual([{ status: 'running', attempts: 1, worker_id: 'w1' }]);
    await expectReadModelsMatchFold(db.pool, [keyStream('handoff')]);
  });

  it('a lease taken from its holder (revoked, expired) is announced on the lease-lost channel at the commit that takes it', async () => {
    const lost: string[] = [];
    const watch = ledger.watchLostLeases((leaseId) => lost.push(leaseId));
    try {
      // Listening once a notification of our own arrives.
      await waitFor('the lease-lost listener', async () => {
        await db.pool.query(`SELECT pg_notify($1, 'probe')`, [LEASE_LOST_CHANNEL]);
        await new Promise((r) => setTimeout(r, 20));
        return lost.includes('probe');
      });
      lost.length = 0;
      await ledger.enqueueMany([
        { name: 'x', key: 'lost', limit: 2, jobId: 'lost-1', leaseMs: 5_000 },
        { name: 'x', key: 'lost', jobId: 'lost-2', leaseMs: 5_000 },
      ]);
      await ok('lost', { type: 'Start', jobId: 'lost-1', leaseId: 'lost-1:1', workerId: 'w1' });
      await ok('lost', { type: 'Start', jobId: 'lost-2', leaseId: 'lost-2:2', workerId: 'w1' });
      await ok('lost', { type: 'RevokeLease', jobId: 'lost-1', by: 'ops', jitter: 0 });
      await waitFor('the revoked lease', () => lost.includes('lost-1:1'));
      // Its worker stopped the handler and says so: the slot passes on, nothing more is announced.
      await ok('lost', { type: 'Stopped', jobId: 'lost-1', leaseId: 'lost-1:1', jitter: 0 });
      clock.advance(6_000);
      await ok('lost', { type: 'ExpireLeases', jitter: 0 });
      await waitFor('the expired lease', () => lost.includes('lost-2:2'));
      expect(lost).toEqual(['lost-1:1', 'lost-2:2']);
    } finally {
      await watch.stop();
    }
  });

  it('failures, retries, yields, expiry and dead jobs: read models follow the fold, attempts follow the starts', async () => {
    const key = 'lifecycle';
    const stream = keyStream(key);
    await ledger.enqueueMany([
      { name: 'x', key, limit: 2, jobId: 'lc-1', maxAttempts: 2, leaseMs: 5_000 },
      { name: 'x', key, jobId: 'lc-2', maxAttempts: 1 },
      { name: 'x', key, jobId: 'lc-3', priority: -1 },
      { name: 'x', key, jobId: 'lc-4', delayMs: 10_000 },
    ]);
    const exec = (command: Command) => ok(key, command);
    await exec({ type: 'Start', jobId: 'lc-1', leaseId: 'lc-1:1', workerId: 'w1' });
    await exec({ type: 'Fail', jobId: 'lc-1', leaseId: 'lc-1:1', error: 'first failure', jitter: 0.5 });
    // lc-3 (priority -1) took the slot; lc-1 is scheduled for its retry
    let view = await readModelView(db.pool, stream);
    expect(view.holders.map((h) => h.jobId)).toEqual(['lc-2', 'lc-3']);
    expect(view.scheduled.map((s) => s.jobId)).toEqual(['lc-1', 'lc-4']);
    expect((await db.pool.query(`SELECT last_error, attempts, status FROM jl_jobs WHERE job_id = 'lc-1'`)).rows).toEqual([{ last_error: 'first failure', attempts: 1, status: 'scheduled' }]);
    await expectReadModelsMatchFold(db.pool, [stream]);

    await exec({ type: 'Start', jobId: 'lc-2', leaseId: 'lc-2:2', workerId: 'w2' });
    await exec({ type: 'Yield', jobId: 'lc-3', leaseId: 'lc-3:3' }); // never started: nothing handed back
    await expectReadModelsMatchFold(db.pool, [stream]);
    clock.advance(40_000); // lc-2's lease (30 s) has run out; lc-1 and lc-4 are due
    await exec({ type: 'ExpireLeases', jitter: 0 });
    // lc-2 had one attempt, maxAttempts 1: dead
    expect((await db.pool.query(`SELECT status, finish_reason FROM jl_jobs WHERE job_id = 'lc-2'`)).rows[0]).toMatchObject({ status: 'dead' });
    await exec({ type: 'AdmitDue' });
    await expectReadModelsMatchFold(db.pool, [stream]);
    view = await readModelView(db.pool, stream);
    // Admitted, not started: they hold their slots without expiry.
    for (const h of view.holders.filter((x) => x.workerId === null)) expect(h.expiresAt).toBeNull();
    const { state } = await ledger.keyState(key);
    for (const h of holders(state)) {
      if (h.lease!.workerId === null) await exec({ type: 'Start', jobId: h.jobId, leaseId: h.lease!.leaseId, workerId: 'w3' });
      await exec({ type: 'Yield', jobId: h.jobId, leaseId: h.lease!.leaseId }); // started: the attempt is handed back
    }
    await expectReadModelsMatchFold(db.pool, [stream]);
    await exec({ type: 'DiscardParked', by: 'ops' });
    await exec({ type: 'RevokeLease', by: 'ops', jitter: 0 });
    await expectReadModelsMatchFold(db.pool, [stream]);
    expect(await n(`SELECT count(*) AS n FROM jl_jobs WHERE key = $1 AND status = 'discarded' AND finish_reason = 'discarded by ops'`, [key])).toBeGreaterThan(0);
    await expectClaimableMatchFold(db.pool);
  });

  it('jobs without a key: own stream, no KeyLimitSet and no jl_keys row, each claimable', async () => {
    await ledger.enqueue({ name: 'solo', args: [1, 2], jobId: 'solo-1', leaseMs: 7_000 });
    expect((await eventsOf(db.pool, 'job:solo-1')).map((e) => e.type)).toEqual(['JobEnqueued', 'SlotAcquired']);
    expect((await db.pool.query(`SELECT stream, key, status FROM jl_jobs WHERE job_id = 'solo-1'`)).rows).toEqual([{ stream: 'job:solo-1', key: null, status: 'holding' }]);
    expect(await n(`SELECT count(*) AS n FROM jl_keys WHERE stream = 'job:solo-1'`)).toBe(0);
    expect((await claimable('default')).filter((m) => m.jobId === 'solo-1')).toEqual([{ jobId: 'solo-1', key: null, stream: 'job:solo-1', leaseId: 'solo-1:1', name: 'solo', args: [1, 2], attempt: 1, leaseMs: 7_000 }]);
    await expectReadModelsMatchFold(db.pool, ['job:solo-1']);
  });

  it('a randomized run of 400 commands over 4 keys (some jobs also under 2 limit keys): read models = fold of every stream, each unstarted admission claimable once', async () => {
    await randomRun(ledger, clock, { seed: 20240604, steps: 400, keys: ['r:a', 'r:b', 'r:c', 'r:d'], limitKeys: ['r:t', 'r:u'], prefix: 'rnd' });
    // the run went through every kind of event
    const { rows: types } = await db.pool.query(`SELECT DISTINCT type FROM events WHERE stream LIKE 'key:r:%' ORDER BY type`);
    expect(types.map((r) => r.type)).toEqual(KeyEvent.types.map((c) => c.name).sort());
    await expectReadModelsMatchFold(db.pool);
    const unstarted = await n(UNSTARTED_ADMISSIONS);
    expect(await expectClaimableMatchFold(db.pool)).toBe(unstarted);
    expect(unstarted).toBeGreaterThan(5);
  });

  it('10 concurrent writers (enqueue, start, complete on shared keys): read models = fold, each unstarted admission claimable once', async () => {
    const keys = ['cc:a', 'cc:b', 'cc:c'];
    const ledgers = await Promise.all(Array.from({ length: 10 }, () => createLedger({ pool: db.pool, migrate: false, logger: silentLogger })));
    await Promise.all(
      ledgers.map(async (l, w) => {
        for (let i = 0; i < 12; i++) {
          const key = keys[(w + i) % keys.length]!;
          await l.enqueue({ name: 'c', key, limit: 2, jobId: `cc-${w}-${i}` });
          const { state } = await l.keyState(key);
          const free = holders(state).filter((j) => j.lease!.workerId === null);
          const pick = free[w % Math.max(1, free.length)];
          if (!pick) continue;
          const started = await l.execute(keyStream(key), { type: 'Start', jobId: pick.jobId, leaseId: pick.lease!.leaseId, workerId: `w${w}` });
          if (E.isRight(started)) await l.execute(keyStream(key), { type: 'Complete', jobId: pick.jobId, leaseId: pick.lease!.leaseId });
        }
      }),
    );
    await Promise.all(ledgers.map((l) => l.close()));
    await expectReadModelsMatchFold(db.pool, keys.map(keyStream));
    expect(await expectClaimableMatchFold(db.pool)).toBe(await n(UNSTARTED_ADMISSIONS));
    expect(await n(`SELECT count(*) AS n FROM jl_jobs WHERE job_id LIKE 'cc-%'`)).toBe(120);
    expect((await verify(db.pool, createReadModelProjections())).differences).toEqual([]);
  });

  it('10 writers racing to create the same key all write: the losers read the stream the winner created', async () => {
    // A loser locked a stream that did not exist yet, cached it as "no_stream, written last by
    // me", and lost the INSERT INTO streams (streams_pkey: TransientWriteError). Its rerun must
    // lock and read the stream, not write on that cached state again (before f282c91 every rerun
    // did, and failed the same way until ConflictRetriesExhaustedError).
    const ledgers = await Promise.all(Array.from({ length: 10 }, () => createLedger({ pool: db.pool, migrate: false, logger: silentLogger })));
    try {
      const results = await Promise.allSettled(ledgers.map((l, w) => l.enqueue({ name: 'c', key: 'race:new', limit: 10, jobId: `race-${w}` })));
      expect(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason))).toEqual([]);
      expect(await n(`SELECT count(*) AS n FROM jl_jobs WHERE key = 'race:new'`)).toBe(10);
      await expectReadModelsMatchFold(db.pool, [keyStream('race:new')]);
      await expectClaimableMatchFold(db.pool);
    } finally {
      await Promise.all(ledgers.map((l) => l.close()));
    }
  });
});

describe('a failed flush writes nothing', () => {
  const snapshot = async () =>
    (
      await db.pool.query(`SELECT (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM streams) AS streams, (SELECT count(*) FROM jl_jobs) AS jobs,
        (SELECT count(*) FROM jl_slots) AS slots, (SELECT count(*) FROM jl_keys) AS keys, (SELECT count(*) FROM projection_checkpoints) AS checkpoints`)
    ).rows[0];

  const enqueueCommand = (jobId: string) =>
    ({ type: 'Enqueue', limit: 1, job: { jobId, name: 'a', args: null, queue: 'default', priority: 0, maxAttempts: 3, runAt: null } }) as const;

  const failing: Projection = { name: 'failing', handles: () => true, project: () => [statement('SELECT 1/0')] };

  it('an inline projection statement that fails (after the read models and the dispatcher) rolls back the events and the rows', async () => {
    const store = new PostgresEventStore(db.pool, { inline: [createReadModelProjections(), createDispatcher(), failing] });
    const writer = new KeyWriter(store, store, { eventId: keyEventId, clock: clock.now, logger: silentLogger });
    const before = await snapshot();
    await expect(writer.execute(keyStream('fails'), enqueueCommand('fails-1'))).rejects.toThrow(/division by zero/);
    await expect(store.append(keyStream('fails'), 'no_stream', [{ type: 'KeyLimitSet', data: { limit: 1, leaseMs: 30_000, by: null, at: clock.now() } }])).rejects.toThrow(/division by zero/);
    expect(await snapshot()).toEqual(before);
    expect(await eventsOf(db.pool, keyStream('fails'))).toEqual([]);
    await writer.drain();
  });

  it('an update of a job that has no row fails the flush (jl_expect_rows) instead of losing the job: an admission is never left without its row', async () => {
    await ledger.enqueue({ name: 'a', key: 'orphan', limit: 1, jobId: 'orphan-1' });
    await ledger.enqueue({ name: 'a', key: 'orphan', jobId: 'orphan-2' });
    // The parked job's row gone (a broken read model): its promotion would be written nowhere.
    await db.pool.query(`DELETE FROM jl_jobs WHERE job_id = 'orphan-2'`);
    const before = await snapshot();
    await expect(ok('orphan', { type: 'Cancel', jobId: 'orphan-1', by: 'ops' })).rejects.toThrow(/read model: 1 of 2 rows of jl_jobs found/);
    expect(await snapshot()).toEqual(before);
    await rebuild(db.pool, createReadModelProjections());
    await expectReadModelsMatchFold(db.pool, [keyStream('orphan')]);
  });

  it('a conflicting expected revision in appendMany rolls back the other streams, read rows and messages included', async () => {
    await ledger.enqueue({ name: 'a', key: 'conflict', jobId: 'conflict-1' });
    const before = await snapshot();
    const store = new PostgresEventStore(db.pool, { inline: [createReadModelProjections(), createDispatcher()] });
    const error = await store
      .appendMany([
        { stream: keyStream('conflict-ok'), expected: 'no_stream', events: [{ type: 'KeyLimitSet', data: { limit: 1, leaseMs: 30_000, by: null, at: clock.now() } }] },
        { stream: keyStream('conflict'), expected: 0, events: [{ type: 'JobParked', data: { jobId: 'conflict-1', at: clock.now() } }] },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WrongExpectedRevisionError);
    expect(await snapshot()).toEqual(before);
  });
});

describe('what inline application does and does not guard', () => {
  it('an event appended around the projections (a store without them) is not detected at append time any more: verify reports it, rebuild repairs it', async () => {
    // There is no per-stream bookkeeping (projection_streams is gone), so no gap detection:
    // every writer of a ledger must apply the inline projections (Ledger.open does).
    await ledger.enqueue({ name: 'a', key: 'around', jobId: 'around-1' });
    await ok('around', { type: 'Start', jobId: 'around-1', leaseId: 'around-1:1', workerId: 'w1' });
    const bare = new PostgresEventStore(db.pool);
    const revision = (await eventsOf(db.pool, keyStream('around'))).at(-1)!.revision;
    await bare.append(keyStream('around'), revision, [{ type: 'LeaseRenewed', data: { jobId: 'around-1', leaseId: 'around-1:1', expiresAt: clock.now() + 60_000, at: clock.now() } }]);
    await ledger.enqueue({ name: 'a', key: 'around', jobId: 'around-2' });
    const { differences } = await verify(db.pool, createReadModelProjections());
    expect(differences).toEqual([
      { table: 'jl_jobs', key: { job_id: 'around-1' }, kind: 'changed', columns: [{ column: 'expires_at', live: expect.any(String), ledger: expect.any(String) }] },
    ]);
    const before = await readModelRows(db.pool);
    await rebuild(db.pool, createReadModelProjections());
    expect((await verify(db.pool, createReadModelProjections())).differences).toEqual([]);
    expect((await readModelRows(db.pool)).jl_slots).not.toEqual(before.jl_slots);
    await expectReadModelsMatchFold(db.pool, [keyStream('around')]);
  });

  it('inline, every event of a batch carries the same commit (the one transaction being written), whatever the flush locked', async () => {
    // ProjectedEvent.commit only tells a batch's transactions apart: an inline batch is one, whose
    // statements go out before its id is known when the flush locks in its write round trip.
    await db.pool.query(`CREATE TABLE test_projected_commits (stream text, revision bigint, commit numeric)`);
    const recorder: Projection = {
      name: 'commits',
      handles: (s) => s.startsWith('key:commits'),
      project: (events) => [
        statement(
          `INSERT INTO test_projected_commits SELECT * FROM jsonb_to_recordset($1::jsonb) AS x (stream text, revision bigint, commit numeric)`,
          JSON.stringify(events.map((e) => ({ stream: e.stream, revision: e.revision, commit: e.commit.toString() }))),
        ),
      ],
    };
    const store = new PostgresEventStore(db.pool, { inline: [createReadModelProjections(), createDispatcher(), recorder] });
    const writer = new KeyWriter(store, store, { eventId: keyEventId, clock: clock.now, logger: silentLogger });
    for (let i = 0; i < 3; i++) {
      const result = await writer.execute(keyStream('commits'), { type: 'Enqueue', limit: 1, job: { jobId: `commits-${i}`, name: 'a', args: null, queue: 'default', priority: 0, maxAttempts: 3, runAt: null } });
      expect(E.isRight(result)).toBe(true);
    }
    await writer.drain();
    const { rows } = await db.pool.query(
      `SELECT e.transaction_id::text AS written, count(DISTINCT p.commit)::int AS commits
       FROM test_projected_commits p JOIN events e ON e.stream = p.stream AND e.stream_revision = p.revision GROUP BY 1`,
    );
    expect(rows.length).toBe(3);
    expect(rows.map((r) => r.commits)).toEqual([1, 1, 1]);
  });
});

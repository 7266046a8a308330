import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { PgQueue } from '../../src/adapters/queue/pg-queue.js';
import { keyEventId } from '../../src/commands/enqueue.js';
import { KeyCommandHandler } from '../../src/commands/key-command-handler.js';
import { KeyEvent } from '../../src/domain/events.js';
import { holders } from '../../src/domain/key-state.js';
import { WrongExpectedRevisionError } from '../../src/domain/ports/event-store.js';
import { keyStream } from '../../src/domain/streams.js';
import { createDispatcher } from '../../src/projections/dispatcher.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { ProjectionGapError, inlineProjections } from '../../src/projections/runner.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { eventsOf, expectOneMessagePerAdmission, expectReadModelsMatchFold, manualClock, randomRun, readModelView } from './support.js';
import { silentLogger } from '../../src/domain/ports/logger.js';

let db: MigratedDatabase;
let ledger: Ledger;
const clock = manualClock();

beforeAll(async () => {
  // pipelined, like the ledger's own pool: the runner sends each batch's statements together
  db = await createMigratedDatabase(30, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: clock.now, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});


/** Admissions that get a message: all but those a direct handoff started in the same append. */
const ADMISSIONS_SENT = `
  SELECT count(*) AS n FROM events a
  WHERE a.type IN ('SlotAcquired', 'JobPromoted')
    AND NOT EXISTS (SELECT 1 FROM events s WHERE s.type = 'JobStarted' AND s.transaction_id = a.transaction_id AND s.data->>'leaseId' = a.data->>'leaseId')`;

const count = async (sql: string, values: unknown[] = []): Promise<number> => Number((await db.pool.query(sql, values)).rows[0].n);

describe('inline projections (Ledger.open default)', () => {
  it('an enqueue writes the job, the slot, the key and one message in the append', async () => {
    const t0 = clock.now();
    await ledger.enqueue({ name: 'email', args: { to: 'a@b' }, key: 'basic', limit: 1, jobId: 'basic-1', queue: 'mail', priority: 2 });
    await ledger.enqueue({ name: 'email', args: { to: 'c@d' }, key: 'basic', jobId: 'basic-2', queue: 'mail' });
    const { rows: jobs } = await db.pool.query(`SELECT job_id, stream, key, seq, name, queue, args, priority, status, attempts, max_attempts, lease_ms, enqueued_at, lease_id FROM jl_jobs WHERE key = 'basic' ORDER BY seq`);
    expect(jobs).toEqual([
      { job_id: 'basic-1', stream: 'key:basic', key: 'basic', seq: '1', name: 'email', queue: 'mail', args: { to: 'a@b' }, priority: '2', status: 'holding', attempts: 0, max_attempts: 5, lease_ms: 30_000, enqueued_at: new Date(t0), lease_id: 'basic-1:1' },
      { job_id: 'basic-2', stream: 'key:basic', key: 'basic', seq: '3', name: 'email', queue: 'mail', args: { to: 'c@d' }, priority: '0', status: 'parked', attempts: 0, max_attempts: 5, lease_ms: 30_000, enqueued_at: new Date(t0), lease_id: null },
    ]);
    const { rows: stats } = await db.pool.query(`SELECT key, concurrency_limit, in_use, parked, scheduled, oldest_parked_at, next_lease_expiry FROM jl_key_stats WHERE key = 'basic'`);
    expect(stats).toEqual([{ key: 'basic', concurrency_limit: 1, in_use: 1, parked: 1, scheduled: 0, oldest_parked_at: new Date(t0), next_lease_expiry: new Date(t0 + 30_000) }]);
    const messages = await new PgQueue(db.pool).read<unknown>('mail', 1_000, 10);
    expect(messages.map((m) => m.message)).toEqual([{ jobId: 'basic-1', key: 'basic', leaseId: 'basic-1:1', name: 'email', args: { to: 'a@b' }, attempt: 1 }]);

    // start, complete: the slot goes to basic-2 in the same append, and so does its message
    const stream = keyStream('basic');
    expect(E.isRight(await ledger.execute(stream, { type: 'Start', jobId: 'basic-1', leaseId: 'basic-1:1', workerId: 'w1' }))).toBe(true);
    clock.advance(1_000);
    expect(E.isRight(await ledger.execute(stream, { type: 'Complete', jobId: 'basic-1', leaseId: 'basic-1:1' }))).toBe(true);
    const { rows: after } = await db.pool.query(`SELECT job_id, status, attempts, worker_id, lease_id, finished_at FROM jl_jobs WHERE key = 'basic' ORDER BY seq`);
    expect(after).toEqual([
      { job_id: 'basic-1', status: 'completed', attempts: 1, worker_id: 'w1', lease_id: null, finished_at: new Date(t0 + 1_000) },
      { job_id: 'basic-2', status: 'holding', attempts: 0, worker_id: null, lease_id: 'basic-2:2', finished_at: null },
    ]);
    expect((await db.pool.query(`SELECT job_id, how FROM jl_slots WHERE key = 'basic'`)).rows).toEqual([{ job_id: 'basic-2', how: 'promoted' }]);
    expect(await count(`SELECT count(*) AS n FROM jl_parked WHERE key = 'basic'`)).toBe(0);
    expect(await count(`SELECT count(*) AS n FROM dispatch_jobs WHERE key = 'basic'`)).toBe(1); // basic-1 finished: gone
    const next = await new PgQueue(db.pool).read<{ leaseId: string }>('mail', 1_000, 10);
    expect(next.map((m) => m.message.leaseId)).toEqual(['basic-2:2']);
    await expectReadModelsMatchFold(db.pool, [stream]);
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
    const exec = async (command: Parameters<Ledger['execute']>[1]) => {
      const result = await ledger.execute(stream, command);
      expect(E.isRight(result)).toBe(true);
    };
    await exec({ type: 'Start', jobId: 'lc-1', leaseId: 'lc-1:1', workerId: 'w1' });
    await exec({ type: 'Fail', jobId: 'lc-1', leaseId: 'lc-1:1', error: 'first failure', jitter: 0.5 });
    // lc-3 (priority -1) took the slot; lc-1 is scheduled for its retry
    let view = await readModelView(db.pool, stream);
    expect(view.holders.map((h) => h.jobId)).toEqual(['lc-2', 'lc-3']);
    expect(view.scheduled.map((s) => s.jobId)).toEqual(['lc-1', 'lc-4']);
    expect((await db.pool.query(`SELECT last_error, attempts FROM jl_jobs WHERE job_id = 'lc-1'`)).rows).toEqual([{ last_error: 'first failure', attempts: 1 }]);
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
    const { state } = await ledger.keyState(key);
    for (const h of holders(state)) {
      await exec({ type: 'Start', jobId: h.jobId, leaseId: h.lease!.leaseId, workerId: 'w3' });
      await exec({ type: 'Yield', jobId: h.jobId, leaseId: h.lease!.leaseId }); // started: the attempt is handed back
    }
    await expectReadModelsMatchFold(db.pool, [stream]);
    await exec({ type: 'DiscardParked', by: 'ops' });
    await exec({ type: 'RevokeLease', by: 'ops', jitter: 0 });
    await expectReadModelsMatchFold(db.pool, [stream]);
    expect(await count(`SELECT count(*) AS n FROM jl_jobs WHERE key = $1 AND status = 'discarded' AND finish_reason = 'discarded by ops'`, [key])).toBeGreaterThan(0);
    await expectOneMessagePerAdmission(db.pool);
  });

  it('jobs without a key: own stream, no jl_keys row, one message each', async () => {
    await ledger.enqueue({ name: 'solo', args: [1, 2], jobId: 'solo-1' });
    expect((await db.pool.query(`SELECT stream, key, status FROM jl_jobs WHERE job_id = 'solo-1'`)).rows).toEqual([{ stream: 'job:solo-1', key: null, status: 'holding' }]);
    expect(await count(`SELECT count(*) AS n FROM jl_keys WHERE stream = 'job:solo-1'`)).toBe(0);
    const messages = (await db.pool.query(`SELECT message FROM queue_messages WHERE message->>'jobId' = 'solo-1'`)).rows;
    expect(messages).toEqual([{ message: { jobId: 'solo-1', key: null, leaseId: 'solo-1:1', name: 'solo', args: [1, 2], attempt: 1 } }]);
  });

  it('a randomized run of 400 commands over 4 keys: read models = fold of every stream, one message per admission', async () => {
    await randomRun(ledger, clock, { seed: 20240601, steps: 400, keys: ['r:a', 'r:b', 'r:c', 'r:d'], prefix: 'rnd' });
    // the run went through every kind of event
    const { rows: types } = await db.pool.query(`SELECT DISTINCT type FROM events WHERE stream LIKE 'key:r:%' ORDER BY type`);
    expect(types.map((r) => r.type)).toEqual(Object.keys(KeyEvent.types.reduce((o, c) => ({ ...o, [c.name]: 1 }), {})).sort());
    await expectReadModelsMatchFold(db.pool);
    const admissions = await count(ADMISSIONS_SENT);
    expect(await expectOneMessagePerAdmission(db.pool)).toBe(admissions);
    expect(admissions).toBeGreaterThan(50);
  });

  it('10 concurrent writers (enqueue, start, complete on shared keys): exactly one message per admission', async () => {
    const ledgers = await Promise.all(Array.from({ length: 10 }, () => createLedger({ pool: db.pool, migrate: false, logger: silentLogger })));
    const keys = ['cc:a', 'cc:b', 'cc:c'];
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
    const streams = keys.map(keyStream);
    await expectReadModelsMatchFold(db.pool, streams);
    const admissions = await count(ADMISSIONS_SENT);
    expect(await expectOneMessagePerAdmission(db.pool)).toBe(admissions);
  });
});

describe('a failed append writes nothing', () => {
  const snapshot = async () =>
    (
      await db.pool.query(`SELECT (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM jl_jobs) AS jobs, (SELECT count(*) FROM jl_slots) AS slots,
        (SELECT count(*) FROM dispatch_jobs) AS dispatch, (SELECT count(*) FROM queue_messages) AS messages, (SELECT count(*) FROM projection_streams) AS revisions`)
    ).rows[0];

  const enqueueCommand = (jobId: string) =>
    ({ type: 'Enqueue', limit: 1, job: { jobId, name: 'a', args: null, queue: 'default', priority: 0, maxAttempts: 3, runAt: null } }) as const;

  it('an inline handler error (here: the queue send) rolls back the events, the read rows and the messages', async () => {
    const queue = new PgQueue(db.pool);
    const failing = inlineProjections([createReadModelProjections(), createDispatcher()], {
      send: async (client, name, messages) => {
        await queue.sendBatch(name, messages, { db: client });
        throw new Error('queue down');
      },
    });
    const store = new PostgresEventStore(db.pool, { inlineHandlers: [failing] });
    const handler = new KeyCommandHandler({ store }, { eventId: keyEventId });
    const before = await snapshot();
    await expect(handler.execute(keyStream('fails'), enqueueCommand('fails-1'))).rejects.toThrow('queue down');
    expect(await snapshot()).toEqual(before);
    expect(await eventsOf(db.pool, keyStream('fails'))).toEqual([]);
  });

  it('a conflicting expected revision in a batch rolls back the other streams of the batch, read rows and messages included', async () => {
    await ledger.enqueue({ name: 'a', key: 'conflict', jobId: 'conflict-1' });
    const before = await snapshot();
    const store = new PostgresEventStore(db.pool, { inlineHandlers: [inlineProjections([createReadModelProjections(), createDispatcher()], { send: (c, q, m) => new PgQueue(db.pool).sendBatch(q, m, { db: c }) })] });
    const error = await store
      .appendMany([
        { stream: keyStream('conflict-ok'), expected: 'no_stream', events: [{ type: 'KeyLimitSet', data: { limit: 1, leaseMs: 30_000, by: null, at: clock.now() } }] },
        { stream: keyStream('conflict'), expected: 0, events: [{ type: 'JobParked', data: { jobId: 'conflict-1', at: clock.now() } }] },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WrongExpectedRevisionError);
    expect(await snapshot()).toEqual(before);
  });

  it('an event appended around the projections (a store without them) is a gap: the next inline append fails loudly instead of skipping it', async () => {
    await ledger.enqueue({ name: 'a', key: 'gap', jobId: 'gap-1' });
    const bare = new PostgresEventStore(db.pool);
    const revision = (await eventsOf(db.pool, keyStream('gap'))).at(-1)!.revision;
    await bare.append(keyStream('gap'), revision, [{ type: 'LeaseRenewed', data: { jobId: 'gap-1', leaseId: 'gap-1:1', expiresAt: clock.now() + 60_000, at: clock.now() } }]);
    const error = await ledger.enqueue({ name: 'a', key: 'gap', jobId: 'gap-2' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ProjectionGapError);
    expect(error).toMatchObject({ projection: 'read_models', stream: 'key:gap', applied: revision, revision: revision + 2 });
  });
});

import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { PgQueue } from '../../src/adapters/queue/pg-queue.js';
import { comparePositions, type GlobalPosition, type RecordedEvent } from '../../src/domain/ports/event-store.js';
import { createDispatcher } from '../../src/projections/dispatcher.js';
import type { Projection } from '../../src/projections/projection.js';
import { READ_MODELS, createReadModelProjections } from '../../src/projections/read-models.js';
import { ProjectionBusyError, rebuild } from '../../src/projections/rebuild.js';
import { AsyncProjectionRunner, applyBatch, loadCheckpoint, type SendMessages } from '../../src/projections/runner.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { expectOneMessagePerAdmission, expectReadModelsMatchFold, manualClock, randomRun } from './support.js';
import { silentLogger } from '../../src/domain/ports/logger.js';

let db: MigratedDatabase;
let store: PostgresEventStore;
let ledger: Ledger;
let send: SendMessages;
const clock = manualClock();
const runners: AsyncProjectionRunner[] = [];


beforeAll(async () => {
  db = await createMigratedDatabase(20);
  store = new PostgresEventStore(db.pool);
  // Events only: the projections run from subscriptions here.
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: clock.now, logger: silentLogger, inlineProjections: false });
  const queue = new PgQueue(db.pool);
  send = (client, name, messages) => queue.sendBatch(name, messages, { db: client });
});

afterEach(async () => {
  await Promise.all(runners.splice(0).map((r) => r.stop()));
});

afterAll(async () => {
  await ledger.close();
  await store.close();
  await db.drop();
});

const runner = (projection: Projection, options: { retryMs?: number; batchSize?: number } = {}) => {
  const r = new AsyncProjectionRunner({ pool: db.pool, store, projection, send, pollIntervalMs: 50, retryMs: options.retryMs ?? 100, batchSize: options.batchSize ?? 37, logger: silentLogger });
  runners.push(r);
  r.start();
  return r;
};

const waitFor = async (what: string, check: () => Promise<boolean> | boolean, timeoutMs = 20_000) => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
};

const lastPosition = async (): Promise<GlobalPosition> => {
  const { rows } = await db.pool.query(`SELECT transaction_id::text AS c, global_position AS p FROM events ORDER BY transaction_id DESC, global_position DESC LIMIT 1`);
  return { commit: BigInt(rows[0].c), prepare: BigInt(rows[0].p) };
};

const caughtUp = async (name: string) => {
  const last = await lastPosition();
  await waitFor(`${name} to reach the last event`, async () => comparePositions(await loadCheckpoint(db.pool, name), last) >= 0);
};

/** Every row of the read models, in key order. */
const readModelRows = async () => {
  const rows: Record<string, unknown[]> = {};
  for (const [table, pk] of [['jl_jobs', 'job_id'], ['jl_slots', 'job_id'], ['jl_parked', 'job_id'], ['jl_keys', 'stream']]) {
    rows[table!] = (await db.pool.query(`SELECT * FROM ${table} ORDER BY ${pk} COLLATE "C"`)).rows;
  }
  rows.revisions = (await db.pool.query(`SELECT stream, revision FROM projection_streams WHERE projection = $1 ORDER BY stream`, [READ_MODELS])).rows;
  return rows;
};

const allEvents = (): Promise<RecordedEvent[]> => store.readAll();

describe('async mode', () => {
  it('builds the same read models and messages from a subscription, with the checkpoint at the last event', async () => {
    await randomRun(ledger, clock, { seed: 7, steps: 250, keys: ['a:1', 'a:2', 'a:3'], prefix: 'async' });
    expect((await db.pool.query('SELECT count(*)::int AS n FROM jl_jobs')).rows[0].n).toBe(0); // nothing inline
    runner(createReadModelProjections());
    runner(createDispatcher());
    await caughtUp(READ_MODELS);
    await caughtUp('dispatcher');
    await expectReadModelsMatchFold(db.pool);
    await expectOneMessagePerAdmission(db.pool);

    // and it follows new events as they come
    await randomRun(ledger, clock, { seed: 8, steps: 60, keys: ['a:1', 'a:4'], prefix: 'async-more' });
    await caughtUp(READ_MODELS);
    await caughtUp('dispatcher');
    await expectReadModelsMatchFold(db.pool);
    await expectOneMessagePerAdmission(db.pool);
  });

  // The pipelining client (the ledger's own pool) first applies a batch as if every stream were
  // claimable and undoes that (ROLLBACK TO SAVEPOINT) when one is not: the same outcome must follow.
  it.each([
    ['one statement at a time', false],
    ['pipelined', true],
  ])('applying a batch twice changes nothing; an overlapping batch applies only what is new (%s)', async (_, pipeline) => {
    const pool = pipeline ? new pg.Pool({ connectionString: db.url, max: 2, pipeline: true } as pg.PoolConfig) : db.pool;
    try {
      await twiceAndOverlapping(pool);
    } finally {
      if (pool !== db.pool) await pool.end();
    }
  });

  const twiceAndOverlapping = async (pool: pg.Pool) => {
    const projection = createReadModelProjections();
    const events = await allEvents();
    const live = await readModelRows();
    // The runner of the test before applied them all: applying again skips every one.
    const again = await applyBatch(pool, projection, events);
    expect(again).toMatchObject({ applied: 0 });
    expect(again.skipped).toBeGreaterThan(0);
    expect(await readModelRows()).toEqual(live);

    // From empty tables: half, then all (a redelivery after a crash overlaps what was applied).
    await db.pool.query(`TRUNCATE jl_jobs, jl_slots, jl_parked, jl_keys; DELETE FROM projection_streams WHERE projection = '${READ_MODELS}'`);
    const half = Math.floor(events.length / 2);
    const first = await applyBatch(pool, projection, events.slice(0, half));
    const rest = await applyBatch(pool, projection, events);
    expect(first.applied + rest.applied).toBe(again.skipped);
    expect(rest.skipped).toBe(first.applied);
    expect(await readModelRows()).toEqual(live);
    expect((await applyBatch(pool, projection, events)).applied).toBe(0);
    expect(await readModelRows()).toEqual(live);

    // The dispatcher too: no message is sent twice.
    const messages = (await db.pool.query('SELECT count(*)::int AS n FROM queue_messages')).rows[0].n;
    expect(await applyBatch(pool, createDispatcher(), events, { send })).toMatchObject({ applied: 0, messages: 0 });
    expect((await db.pool.query('SELECT count(*)::int AS n FROM queue_messages')).rows[0].n).toBe(messages);
  };

  it('the checkpoint is written in the batch transaction: a batch that fails moves neither rows nor checkpoint', async () => {
    const name = 'failing_read_models';
    const base = createReadModelProjections();
    const events = (await allEvents()).slice(0, 40);
    const failAt = events[25]!;
    const failing: Projection = {
      ...base,
      name,
      project: (e) => (e.stream === failAt.stream && e.revision === failAt.revision ? [{ text: 'SELECT 1/0', values: [] }] : base.project(e)),
    };
    await db.pool.query(`TRUNCATE jl_jobs, jl_slots, jl_parked, jl_keys`);
    await expect(applyBatch(db.pool, failing, events, { checkpoint: events.at(-1)!.position })).rejects.toThrow(/division by zero/);
    expect(await loadCheckpoint(db.pool, name)).toEqual({ commit: 0n, prepare: 0n });
    expect((await db.pool.query('SELECT count(*)::int AS n FROM jl_jobs')).rows[0].n).toBe(0);
    expect((await db.pool.query('SELECT count(*)::int AS n FROM projection_streams WHERE projection = $1', [name])).rows[0].n).toBe(0);

    await applyBatch(db.pool, failing, events.slice(0, 25), { checkpoint: events[24]!.position });
    expect(await loadCheckpoint(db.pool, name)).toEqual(events[24]!.position);
    // An older checkpoint never moves it back.
    await applyBatch(db.pool, failing, events.slice(0, 10), { checkpoint: events[9]!.position });
    expect(await loadCheckpoint(db.pool, name)).toEqual(events[24]!.position);
    // Restore the real read models for the tests after this one.
    await rebuild(db.pool, base);
  });

  it('a runner whose batch fails keeps its checkpoint, retries, and catches up once the failure is gone', async () => {
    const base = createReadModelProjections();
    const name = 'flaky';
    let failures = 3;
    const flaky: Projection = {
      ...base,
      name,
      project: (e) => {
        if (e.event.type === 'JobStarted' && failures > 0) {
          failures--;
          return [{ text: 'SELECT 1/0', values: [] }];
        }
        return base.project(e);
      },
    };
    // It writes the real tables under another name (the rebuild below restores them): only its
    // checkpoint and its retries matter here.
    await db.pool.query(`TRUNCATE jl_jobs, jl_slots, jl_parked, jl_keys`);
    runner(flaky, { retryMs: 50, batchSize: 1000 });
    await caughtUp(name);
    expect(failures).toBe(0);
    await rebuild(db.pool, base);
  });

  it('one runner per projection: the second stays idle while the first holds the lock, and takes over when it stops or dies', async () => {
    await rebuild(db.pool, createReadModelProjections());
    const first = runner(createReadModelProjections());
    await waitFor('the first runner to lead', () => first.isLeader);
    const second = runner(createReadModelProjections());
    await sleep(400);
    expect(second.isLeader).toBe(false);
    await expect(rebuild(db.pool, createReadModelProjections())).rejects.toBeInstanceOf(ProjectionBusyError);

    await randomRun(ledger, clock, { seed: 9, steps: 40, keys: ['b:1', 'b:2'], prefix: 'lead-1' });
    await caughtUp(READ_MODELS);
    await expectReadModelsMatchFold(db.pool);

    await first.stop();
    await waitFor('the second runner to take over', () => second.isLeader);
    await randomRun(ledger, clock, { seed: 10, steps: 40, keys: ['b:1', 'b:3'], prefix: 'lead-2' });
    await caughtUp(READ_MODELS);
    await expectReadModelsMatchFold(db.pool);

    // The leader's lock connection dies: a runner (the restarted first, or the second) takes over.
    first.start();
    await db.pool.query(`SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()`);
    await waitFor('a runner to lead again', () => first.isLeader || second.isLeader);
    await randomRun(ledger, clock, { seed: 11, steps: 40, keys: ['b:2', 'b:4'], prefix: 'lead-3' });
    await caughtUp(READ_MODELS);
    await expectReadModelsMatchFold(db.pool);
    expect([first.isLeader, second.isLeader].filter(Boolean)).toHaveLength(1);
  });

  it('rebuild leaves a checkpoint an async runner resumes from', async () => {
    const projection = createReadModelProjections();
    const rebuilt = await rebuild(db.pool, projection);
    expect(comparePositions(rebuilt.checkpoint, await lastPosition())).toBe(0);
    await randomRun(ledger, clock, { seed: 12, steps: 40, keys: ['c:1'], prefix: 'resume' });
    runner(projection);
    await caughtUp(READ_MODELS);
    await expectReadModelsMatchFold(db.pool);
  });
});

import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { keyEventId } from '../../src/commands/enqueue.js';
import { KeyWriter } from '../../src/commands/key-writer.js';
import { holders } from '../../src/domain/key-state.js';
import { comparePositions } from '../../src/domain/ports/event-store.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createDispatcher } from '../../src/projections/dispatcher.js';
import { statement, type Projection } from '../../src/projections/projection.js';
import { READ_MODELS, READ_MODEL_TABLES, createReadModelProjections } from '../../src/projections/read-models.js';
import { NotRebuildableError, ProjectionBusyError, REPLAY_SQL, rebuild, rebuildSpec, replayInto } from '../../src/projections/rebuild.js';
import { loadCheckpoint, projectionLockSql } from '../../src/projections/checkpoint.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { count, expectClaimableMatchFold, expectReadModelsMatchFold, manualClock, randomRun, readModelRows, waitFor } from './support.js';

let db: MigratedDatabase;
let ledger: Ledger;
const clock = manualClock();

beforeAll(async () => {
  db = await createMigratedDatabase(30, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: clock.now, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

/** Every row of the read models, the jobs' rows among them: the dispatch messages a worker claims. */
const rows = (): Promise<Record<string, unknown[]>> => readModelRows(db.pool);

const eventCount = () => count(db.pool, 'SELECT count(*) AS n FROM events');

describe('rebuild', () => {
  it('replaying into empty tables from position zero gives the rows the inline projection wrote, the claimable ones included, in batches of any size', async () => {
    await randomRun(ledger, clock, { seed: 42, steps: 300, keys: ['rb:a', 'rb:b', 'rb:c'], prefix: 'rb' });
    const live = await rows();
    expect(live.jl_jobs!.length).toBeGreaterThan(50);
    const total = await eventCount();
    // The live rows came from one batch per flush; a rebuild's batches are whole transactions of
    // about batchSize events (default 20,000): they must all agree.
    for (const batchSize of [1, 7, 100, undefined]) {
      const progress: number[] = [];
      const result = await rebuild(db.pool, createReadModelProjections(), { ...(batchSize === undefined ? {} : { batchSize }), onProgress: (p) => progress.push(p.events) });
      expect(result.events).toBe(total);
      expect(progress.at(-1)).toBe(total);
      // Batches end with whole transactions: about batchSize events each, never fewer but for the last.
      if (batchSize !== undefined) expect(progress.length).toBeLessThanOrEqual(Math.ceil(total / batchSize));
      if (batchSize === undefined) expect(progress).toEqual([total]);
      expect(await rows(), `batchSize ${batchSize}`).toEqual(live);
      // The checkpoint it leaves: the last event below its snapshot's xmin, which any open
      // transaction of the server (of any database) holds back; so at most the last event.
      const last = (await db.pool.query(`SELECT transaction_id::text AS c, global_position::text AS p FROM events ORDER BY transaction_id DESC, global_position DESC LIMIT 1`)).rows[0];
      const at = result.checkpoint;
      expect(comparePositions(at, { commit: BigInt(last.c), prepare: BigInt(last.p) })).toBeLessThanOrEqual(0);
      if (at.commit > 0n) expect(await count(db.pool, `SELECT count(*) AS n FROM events WHERE transaction_id = $1::text::xid8 AND global_position = $2`, [at.commit.toString(), at.prepare.toString()])).toBe(1);
      expect(result.checkpoint).toEqual(await loadCheckpoint(db.pool, READ_MODELS));
    }
  });

  it('replays whole transactions: no batch ends inside one, and each has at least batchSize events but the last', async () => {
    // A transaction of more events than a batch holds: one enqueue over five keys is one flush.
    await ledger.enqueueMany(['rb:w1', 'rb:w2', 'rb:w3', 'rb:w4', 'rb:w5'].map((key) => ({ name: 'wide', key })));
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { rows: snap } = await client.query(`SELECT pg_current_snapshot()::text AS s`);
      let after = { c: '0', p: '0' };
      const batches: { transaction_id_text: string; position: string; types: string[] }[][] = [];
      for (;;) {
        const { rows: batch } = await client.query(REPLAY_SQL, [after.c, after.p, snap[0].s, 3]);
        if (batch.length === 0) break;
        batches.push(batch);
        after = { c: batch.at(-1)!.transaction_id_text, p: batch.at(-1)!.position };
      }
      expect(batches.length).toBeGreaterThan(10);
      expect(batches.flat().reduce((n, row) => n + row.types.length, 0)).toBe(await eventCount());
      expect(batches.flat().length).toBe(await count(db.pool, 'SELECT count(*) AS n FROM ledger_appends'));
      const events = (batch: { types: string[] }[]) => batch.reduce((n, row) => n + row.types.length, 0);
      for (const [i, batch] of batches.entries()) {
        if (i < batches.length - 1) expect(events(batch)).toBeGreaterThanOrEqual(3);
        // The next batch starts with another transaction.
        if (i < batches.length - 1) expect(batches[i + 1]![0]!.transaction_id_text).not.toBe(batch.at(-1)!.transaction_id_text);
      }
      // Some transaction was longer than the rest of its batch: the batch went on to its end.
      expect(batches.some((b) => events(b) > 3)).toBe(true);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it('readers are not blocked while a rebuild is under way: they see the old rows until it commits', async () => {
    const live = await rows();
    const projection = createReadModelProjections();
    const rebuilding = await db.pool.connect();
    const reader = await db.pool.connect();
    try {
      await rebuilding.query('BEGIN');
      await replayInto(rebuilding, projection, rebuildSpec(projection));
      // A TRUNCATE would hold an ACCESS EXCLUSIVE lock until COMMIT: this read would wait for it.
      await reader.query(`SET lock_timeout = '5s'`);
      expect((await reader.query('SELECT * FROM jl_jobs ORDER BY job_id COLLATE "C"')).rows).toEqual(live.jl_jobs);
      expect((await reader.query('SELECT * FROM jl_key_stats ORDER BY stream COLLATE "C"')).rows).toEqual(live.jl_key_stats);
      // The tables are locked against writes (in the projection's write order, so that no flush deadlocks with it).
      const { rows: locks } = await reader.query(
        `SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE l.pid = $1 AND l.mode = 'ExclusiveLock' AND l.granted ORDER BY c.relname`,
        [(await rebuilding.query('SELECT pg_backend_pid() AS pid')).rows[0].pid],
      );
      expect(locks.map((l) => l.relname)).toEqual([...READ_MODEL_TABLES].sort());
      await rebuilding.query('COMMIT');
    } finally {
      await rebuilding.query('ROLLBACK').catch(() => undefined);
      rebuilding.release();
      await reader.query('RESET lock_timeout');
      reader.release();
    }
    expect(await rows()).toEqual(live);
  });

  it('refuses the dispatcher (a replay would send every message again), and a projection an async runner holds', async () => {
    const before = await rows();
    await expect(rebuild(db.pool, createDispatcher())).rejects.toBeInstanceOf(NotRebuildableError);
    const runner = await db.pool.connect();
    try {
      await runner.query(`SELECT pg_advisory_lock(${projectionLockSql(1)})`, [READ_MODELS]);
      await expect(rebuild(db.pool, createReadModelProjections())).rejects.toBeInstanceOf(ProjectionBusyError);
    } finally {
      await runner.query(`SELECT pg_advisory_unlock_all()`);
      runner.release();
    }
    expect(await rows()).toEqual(before);
  });

  it('is safe while flushes with inline projections go on: afterwards the read models are still the fold', async () => {
    const keys = ['live:a', 'live:b', 'live:c'];
    for (const key of keys) await ledger.enqueue({ name: 'live', key, limit: 2, jobId: `live-${key}` });
    const writers = await Promise.all(Array.from({ length: 6 }, () => createLedger({ pool: db.pool, migrate: false, logger: silentLogger })));
    let writing = true;
    let written = 0;
    const work = Promise.all(
      writers.map(async (l, w) => {
        for (let i = 0; writing || i < 5; i++) {
          const key = keys[(w + i) % keys.length]!;
          await l.enqueue({ name: 'live', key, limit: 2, jobId: `live-${w}-${i}` });
          written++;
          const { state } = await l.keyState(key);
          const pick = holders(state).find((j) => j.lease!.workerId === null);
          if (!pick) continue;
          const started = await l.execute(keyStream(key), { type: 'Start', jobId: pick.jobId, leaseId: pick.lease!.leaseId, workerId: `w${w}` });
          if (E.isRight(started)) await l.execute(keyStream(key), { type: 'Complete', jobId: pick.jobId, leaseId: pick.lease!.leaseId });
        }
      }),
    );
    const during: number[] = [];
    for (let i = 0; i < 5; i++) {
      await rebuild(db.pool, createReadModelProjections(), { batchSize: 50 });
      during.push(written);
    }
    writing = false;
    await work;
    await Promise.all(writers.map((l) => l.close()));
    // The writers did write while the rebuilds ran.
    expect(during.at(-1)!).toBeGreaterThan(during[0]!);
    await expectReadModelsMatchFold(db.pool);
    await expectClaimableMatchFold(db.pool);
    const live = await rows();
    await rebuild(db.pool, createReadModelProjections());
    expect(await rows()).toEqual(live);
  });

  it('includes events committed after a flush that is still open (readAll would stop at the open one and lose them), which applies its own once the rebuild commits', async () => {
    // A flush with inline projections held open after writing its events (an inline statement
    // waits for an advisory lock the test holds): its transaction id is older than the one of
    // the flush that commits meanwhile.
    const gate = await db.pool.connect();
    await gate.query('SELECT pg_advisory_lock(4242)');
    const blocker: Projection = { name: 'blocker', handles: () => true, project: () => [statement('SELECT pg_advisory_xact_lock(4242)')] };
    const store = new PostgresEventStore(db.pool, { inline: [blocker, createReadModelProjections(), createDispatcher()] });
    const writer = new KeyWriter(store, store, { eventId: keyEventId, clock: clock.now, logger: silentLogger });
    const heldFlush = writer.execute(keyStream('open:held'), { type: 'Enqueue', limit: 1, job: { jobId: 'open-held', name: 'a', args: null, queue: 'default', priority: 0, maxAttempts: 3, runAt: null } });
    try {
      // The held flush's wait, by its lock: the server runs other test files' databases, whose writers wait on advisory locks too.
      const held = `FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objid = 4242 AND NOT l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`;
      await waitFor('the held flush to wait', async () => (await count(db.pool, `SELECT count(*) AS n ${held}`)) === 1);
      await ledger.enqueue({ name: 'a', key: 'open:later', jobId: 'open-later' });
      const rebuilt = await rebuild(db.pool, createReadModelProjections());
      expect((await db.pool.query(`SELECT job_id FROM jl_jobs WHERE job_id LIKE 'open-%' ORDER BY job_id`)).rows).toEqual([{ job_id: 'open-later' }]);
      // The checkpoint stays below the open transaction: an async runner resuming there reads it once it commits.
      const open = (await db.pool.query(`SELECT a.backend_xid::text AS x FROM pg_stat_activity a WHERE a.pid = (SELECT l.pid ${held})`)).rows[0].x;
      expect(rebuilt.checkpoint.commit < BigInt(open)).toBe(true);
    } finally {
      await gate.query('SELECT pg_advisory_unlock(4242)');
      gate.release();
    }
    expect(E.isRight(await heldFlush)).toBe(true);
    await writer.drain();
    await expectReadModelsMatchFold(db.pool, [keyStream('open:held'), keyStream('open:later')]);
    expect((await db.pool.query(`SELECT job_id FROM jl_jobs WHERE job_id LIKE 'open-%' ORDER BY job_id`)).rows).toEqual([{ job_id: 'open-held' }, { job_id: 'open-later' }]);
    const live = await rows();
    await rebuild(db.pool, createReadModelProjections());
    expect(await rows()).toEqual(live);
  });
});

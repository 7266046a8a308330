import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { PgQueue } from '../../src/adapters/queue/pg-queue.js';
import { keyEventId } from '../../src/commands/enqueue.js';
import { KeyCommandHandler } from '../../src/commands/key-command-handler.js';
import { holders } from '../../src/domain/key-state.js';
import { keyStream } from '../../src/domain/streams.js';
import { createDispatcher } from '../../src/projections/dispatcher.js';
import { READ_MODELS, createReadModelProjections } from '../../src/projections/read-models.js';
import { NotRebuildableError, rebuild, rebuildSpec, replayInto } from '../../src/projections/rebuild.js';
import { inlineProjections } from '../../src/projections/runner.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { expectOneMessagePerAdmission, expectReadModelsMatchFold, manualClock, randomRun } from './support.js';
import { silentLogger } from '../../src/domain/ports/logger.js';

let db: MigratedDatabase;
let ledger: Ledger;
const clock = manualClock();

beforeAll(async () => {
  db = await createMigratedDatabase(30);
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: clock.now, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

/** Every row of the read models and of the dispatcher's side, in key order. */
const rows = async () => {
  const out: Record<string, unknown[]> = {};
  const tables = [
    ['jl_jobs', 'job_id'],
    ['jl_slots', 'job_id'],
    ['jl_parked', 'job_id'],
    ['jl_keys', 'stream'],
    ['jl_key_stats', 'stream'],
    ['dispatch_jobs', 'job_id'],
    ['queue_messages', 'msg_id'],
  ];
  for (const [table, pk] of tables) out[table!] = (await db.pool.query(`SELECT * FROM ${table} ORDER BY ${pk}`)).rows;
  out.revisions = (await db.pool.query(`SELECT * FROM projection_streams ORDER BY projection, stream`)).rows;
  return out;
};

describe('rebuild', () => {
  it('replaying into empty tables from position zero gives the rows the inline projection wrote; the dispatcher is left alone', async () => {
    await randomRun(ledger, clock, { seed: 42, steps: 300, keys: ['rb:a', 'rb:b', 'rb:c'], prefix: 'rb' });
    const live = await rows();
    expect(live.jl_jobs!.length).toBeGreaterThan(50);
    const progress: number[] = [];
    const result = await rebuild(db.pool, createReadModelProjections(), { batchSize: 100, onProgress: (p) => progress.push(p.events) });
    const total = Number((await db.pool.query('SELECT count(*) AS n FROM events')).rows[0].n);
    expect(result.events).toBe(total);
    expect(progress.at(-1)).toBe(total);
    expect(await rows()).toEqual(live);
    expect((await db.pool.query('SELECT commit::text AS c FROM projection_checkpoints WHERE projection = $1', [READ_MODELS])).rows).toEqual([
      { c: result.checkpoint.commit.toString() },
    ]);
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
      expect((await reader.query('SELECT * FROM jl_jobs ORDER BY job_id')).rows).toEqual(live.jl_jobs);
      expect((await reader.query('SELECT * FROM jl_key_stats ORDER BY stream')).rows).toEqual(live.jl_key_stats);
      await rebuilding.query('COMMIT');
    } finally {
      await rebuilding.query('ROLLBACK').catch(() => undefined);
      rebuilding.release();
      await reader.query('RESET lock_timeout');
      reader.release();
    }
    expect(await rows()).toEqual(live);
  });

  it('refuses the dispatcher: a replay would send every message again', async () => {
    const before = await rows();
    await expect(rebuild(db.pool, createDispatcher())).rejects.toBeInstanceOf(NotRebuildableError);
    expect(await rows()).toEqual(before);
  });

  it('is safe while appends with inline projections go on: afterwards the read models are still the fold', async () => {
    const keys = ['live:a', 'live:b', 'live:c'];
    const writers = await Promise.all(Array.from({ length: 6 }, () => createLedger({ pool: db.pool, migrate: false, logger: silentLogger })));
    let writing = true;
    const work = Promise.all(
      writers.map(async (l, w) => {
        for (let i = 0; writing || i < 5; i++) {
          const key = keys[(w + i) % keys.length]!;
          await l.enqueue({ name: 'live', key, limit: 2, jobId: `live-${w}-${i}` });
          const { state } = await l.keyState(key);
          const pick = holders(state).find((j) => j.lease!.workerId === null);
          if (!pick) continue;
          const started = await l.execute(keyStream(key), { type: 'Start', jobId: pick.jobId, leaseId: pick.lease!.leaseId, workerId: `w${w}` });
          if (E.isRight(started)) await l.execute(keyStream(key), { type: 'Complete', jobId: pick.jobId, leaseId: pick.lease!.leaseId });
        }
      }),
    );
    for (let i = 0; i < 5; i++) await rebuild(db.pool, createReadModelProjections(), { batchSize: 50 });
    writing = false;
    await work;
    await Promise.all(writers.map((l) => l.close()));
    await expectReadModelsMatchFold(db.pool);
    await expectOneMessagePerAdmission(db.pool);
    const live = await rows();
    await rebuild(db.pool, createReadModelProjections());
    expect(await rows()).toEqual(live);
  });

  it('includes events committed after an append that is still open (readAll would stop at the open one and lose them)', async () => {
    // An append with inline projections held open after writing its events: its transaction id
    // is older than the one of the append that commits meanwhile.
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const queue = new PgQueue(db.pool);
    const held = new PostgresEventStore(db.pool, {
      inlineHandlers: [
        async () => {
          entered();
          await gate;
        },
        inlineProjections([createReadModelProjections(), createDispatcher()], { send: (c, q, m) => queue.sendBatch(q, m, { db: c }) }),
      ],
    });
    const enqueue = (jobId: string) =>
      ({ type: 'Enqueue', limit: 1, job: { jobId, name: 'a', args: null, queue: 'default', priority: 0, maxAttempts: 3, runAt: null } }) as const;
    const heldAppend = new KeyCommandHandler({ store: held }, { eventId: keyEventId }).execute(keyStream('open:held'), enqueue('open-held'));
    await inside;
    await ledger.enqueue({ name: 'a', key: 'open:later', jobId: 'open-later' });
    await rebuild(db.pool, createReadModelProjections());
    open();
    await heldAppend;
    await expectReadModelsMatchFold(db.pool, [keyStream('open:held'), keyStream('open:later')]);
    expect((await db.pool.query(`SELECT job_id FROM jl_jobs WHERE job_id LIKE 'open-%' ORDER BY job_id`)).rows).toEqual([{ job_id: 'open-held' }, { job_id: 'open-later' }]);
  });
});

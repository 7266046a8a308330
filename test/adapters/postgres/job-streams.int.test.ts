import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { READ_CHECK_SQL, WRITE_FLUSH_SQL, wireAppends } from '../../../src/adapters/eventstore/postgres/stream-sql.js';
import { mapError } from '../../../src/adapters/eventstore/postgres/write-errors.js';
import { archiveFinishedJobs } from '../../../src/adapters/postgres/archive.js';
import type { EventToAppend } from '../../../src/domain/ports/event-store.js';
import { StaleStateError, TransientWriteError } from '../../../src/domain/ports/ledger-store.js';
import { jobStream, keyStream } from '../../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/database.js';
import { until } from '../../support/until.js';

// Issue 22, lever 3: a job's own stream (job:<id>) has no streams row. Its writers take an advisory
// lock on it (all of a transaction's advisory locks first, in one order, then its row locks, in
// one order), its expected revision is checked against its last row (live, else archived), and
// the unique (stream, revision) key of appends stops a second writer that got past the check.

let db: MigratedDatabase;
let pool: pg.Pool;
let store: PostgresEventStore;

beforeAll(async () => {
  db = await createMigratedDatabase(4);
  // Deadlocks found within 10 ms: the deadlock case below finds one quickly if there is one.
  pool = new pg.Pool({ connectionString: db.url, max: 12, pipeline: true, options: '-c deadlock_timeout=10ms' } as pg.PoolConfig);
  pool.on('error', () => undefined);
  store = new PostgresEventStore(pool);
});

afterAll(async () => {
  await store?.close();
  await pool?.end();
  await db?.drop();
});

const event = (type: string): EventToAppend => ({ type, data: { type } });
const prefix = () => randomBytes(4).toString('hex');
const settle = <T>(p: Promise<T>) => p.then((value) => ({ ok: true as const, value }), (error: unknown) => ({ ok: false as const, error }));

/** One write transaction that appends to `stream` at `expected`, as the key writer's optimistic flush does (lockFirst: the lock in the commit's round trip). */
const commitAt = async (stream: string, expected: number | 'no_stream', type: string) => {
  const tx = await store.begin();
  try {
    await tx.commit({ appends: [{ stream, expected, events: [event(type)] }], lockFirst: [stream] });
  } catch (error) {
    await tx.rollback();
    throw error;
  }
};

describe('issue 22: job streams without a streams row', () => {
  it('two writers committing at once at the same expected revision of a job stream: exactly one wins, the other is refused and writes nothing', async () => {
    const p = prefix();
    for (let round = 0; round < 20; round++) {
      const stream = jobStream(`${p}-race-${round}`);
      // Created by both at once: unlocked, so the loser fails on appends_pkey (or, late, on the check).
      const created = await Promise.all([settle(commitAt(stream, 'no_stream', 'A')), settle(commitAt(stream, 'no_stream', 'B'))]);
      expect(created.filter((r) => r.ok)).toHaveLength(1);
      const lost = created.find((r) => !r.ok)!;
      expect(lost.ok === false && (lost.error instanceof TransientWriteError || lost.error instanceof StaleStateError)).toBe(true);
      // Moved on by both at once from revision 0: under the advisory lock, the second sees the first's row.
      const moved = await Promise.all([settle(commitAt(stream, 0, 'C')), settle(commitAt(stream, 0, 'D'))]);
      expect(moved.filter((r) => r.ok)).toHaveLength(1);
      expect(moved.find((r) => !r.ok)).toMatchObject({ error: expect.any(StaleStateError) });
      const read = await store.readStream(stream);
      expect(read.map((e) => e.revision)).toEqual([0, 1]);
      expect(read.map((e) => e.type)).toEqual([created[0]!.ok ? 'A' : 'B', moved[0]!.ok ? 'C' : 'D']);
    }
  });

  it('the backstop: a second writer that passed the check (it took no lock) fails on appends_pkey once the first commits', async () => {
    const stream = jobStream(`${prefix()}-backstop`);
    await store.append(stream, 'no_stream', [event('A0')]);
    const write = (type: string) => {
      const { wire } = wireAppends([{ stream, expected: 0, events: [event(type)] }], () => undefined);
      return { text: WRITE_FLUSH_SQL, values: [JSON.stringify(wire), [], []] };
    };
    const first = await pool.connect();
    const second = await pool.connect();
    try {
      await first.query('BEGIN');
      await first.query(write('First'));
      await second.query('BEGIN');
      const waiting = settle(second.query(write('Second')));
      await until(
        async () => (await pool.query(`SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND pid = $1`, [(second as unknown as { processID: number }).processID])).rows[0].n,
        (n) => n > 0,
        'the second write to wait for the first one\'s row',
      );
      await first.query('COMMIT');
      const outcome = await waiting;
      // The key of this week's partition of appends (migration 17).
      expect(outcome).toMatchObject({ ok: false, error: { code: '23505', constraint: expect.stringMatching(/^appends_w\d{8}_pkey$/) } });
      expect(mapError(outcome.ok ? undefined : outcome.error)).toBeInstanceOf(TransientWriteError);
      await second.query('ROLLBACK');
    } finally {
      first.release();
      second.release();
    }
    expect((await store.readStream(stream)).map((e) => e.type)).toEqual(['A0', 'First']);
  });

  it('a job stream whose last writer is younger than the transaction is deferred (its last row says so), and a write on it refused', async () => {
    const stream = jobStream(`${prefix()}-younger`);
    const other = keyStream(`${prefix()}-older`);
    await store.append(other, 'no_stream', [event('K0')]);
    const older = await store.begin();
    try {
      // The older transaction takes its id first (by locking another stream), then the younger writes and commits.
      await older.lock([{ stream: other }]);
      await store.append(stream, 'no_stream', [event('J0')]);
      const locked = await older.lock([{ stream, after: 'no_stream' }]);
      expect(locked.get(stream)).toMatchObject({ revision: 0, deferred: true });
      await expect(older.commit({ appends: [{ stream, expected: 0, events: [event('J1')] }] })).rejects.toBeInstanceOf(StaleStateError);
    } finally {
      await older.rollback();
    }
    expect((await store.readStream(stream)).map((e) => e.type)).toEqual(['J0']);
  });

  it('jl_check_read answers for job streams: live, archived (all its rows moved), and absent', async () => {
    const [live, gone, never] = ['live', 'gone', 'never'].map((n) => jobStream(`${prefix()}-${n}`));
    await store.append(live!, 'no_stream', [event('A'), event('B')]);
    await store.append(gone!, 'no_stream', [event('A')]);
    await store.append(gone!, 0, [event('B'), event('C')]);
    await pool.query(
      `WITH moved AS (DELETE FROM appends WHERE stream = $1 RETURNING position, transaction_id, stream, revision, types, ids, data, metadata, metadatas, created)
       INSERT INTO appends_archive (position, transaction_id, stream, revision, types, ids, data, metadata, metadatas, created) SELECT * FROM moved`,
      [gone],
    );
    const check = (streams: string[], revisions: number[]) => pool.query(READ_CHECK_SQL, [streams, revisions]);
    await check([live!, gone!, never!], [1, 2, -1]);
    for (const [stream, wrong] of [[live!, 0], [gone!, 1], [never!, 0]] as const) {
      await expect(check([stream], [wrong])).rejects.toMatchObject({ code: 'JL001', detail: stream });
    }
    // The writer's lock finds the archived one's revision and events there too.
    const tx = await store.begin();
    try {
      const locked = await tx.lock([{ stream: gone!, after: 'no_stream' }]);
      expect(locked.get(gone!)!.revision).toBe(2);
      expect(locked.get(gone!)!.events.map((e) => e.type)).toEqual(['A', 'B', 'C']);
    } finally {
      await tx.rollback();
    }
  });

  it('a row holds at most 2^20 events: a larger append is refused before anything is written', async () => {
    const stream = jobStream(`${prefix()}-huge`);
    const one = event('E');
    await expect(store.append(stream, 'no_stream', Array.from({ length: 2 ** 20 + 1 }, () => one))).rejects.toThrow(/1048577 events, more than one row holds \(1048576\)/);
    expect(await store.readStream(stream)).toEqual([]);
  });

  it('no deadlock while concurrent flushes lock job and key streams in every order (lock, lockFirst, archive), though the same locks taken in the order asked do deadlock', async () => {
    const p = prefix();
    const streams = [...['a', 'b', 'c', 'd', 'e', 'f'].map((n) => jobStream(`${p}-${n}`)), ...['a', 'b', 'c', 'd', 'e', 'f'].map((n) => keyStream(`${p}-${n}`))];
    for (const stream of streams) await store.append(stream, 'no_stream', [event('Created')]);
    const pick = () => [...streams].sort(() => Math.random() - 0.5).slice(0, 2 + Math.floor(Math.random() * 5));
    const isDeadlock = (error: unknown) => error instanceof Error && /deadlock detected/.test(error.message);
    // Whether anyone waited for a lock meanwhile: the run contended, so an order that could deadlock would have.
    let waited = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        waited += (await db.pool.query(`SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE NOT l.granted AND a.datname = current_database()`)).rows[0].n;
        await sleep(2);
      }
    })();
    const run = async (body: () => Promise<void>) => {
      let deadlocks = 0;
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          for (let i = 0; i < 30; i++) await body().catch((error: unknown) => (isDeadlock(error) ? deadlocks++ : Promise.reject(error)));
        }),
      );
      return deadlocks;
    };
    const ours = await run(async () => {
      const roll = Math.random();
      if (roll < 0.1) {
        await archiveFinishedJobs(pool, { before: Date.now(), exact: true, streamsPerBatch: 5 });
        return;
      }
      const tx = await store.begin();
      try {
        if (roll < 0.55) {
          await tx.lock(pick().map((stream) => ({ stream })));
          await sleep(Math.random() * 3);
          await tx.rollback();
        } else {
          await tx.commit({ appends: [], lockFirst: pick() });
        }
      } catch (error) {
        await tx.rollback();
        throw error;
      }
    });
    sampling = false;
    await sampler;
    expect(ours).toBe(0);
    expect(waited).toBeGreaterThan(0);
    // The control: the same locks, one statement each in the order picked, deadlock.
    const naive = await run(async () => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        for (const stream of pick()) {
          await client.query(stream.startsWith('job:') ? 'SELECT pg_advisory_xact_lock(hashtextextended($1, 0))' : 'SELECT FROM streams WHERE stream = $1 FOR UPDATE', [stream]);
          await sleep(Math.random());
        }
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      } finally {
        client.release();
      }
    });
    expect(naive).toBeGreaterThan(0);
  });
});

// An event id the port was given must stay unique, also when appended by two writers at once.
describe('issue 22: the ids given through the port are unique', () => {
  it('a given id appended twice, at once to two streams, is recorded once; recordedEventIds finds it', async () => {
    for (let round = 0; round < 10; round++) {
      const id = randomUUID();
      const [x, y] = [jobStream(`${prefix()}-x`), keyStream(`${prefix()}-y`)];
      const results = await Promise.all([settle(store.append(x, 'no_stream', [{ ...event('X'), eventId: id }])), settle(store.append(y, 'no_stream', [{ ...event('Y'), eventId: id }]))]);
      expect(results.filter((r) => r.ok)).toHaveLength(1);
      expect(results.find((r) => !r.ok)).toMatchObject({ error: { name: 'DuplicateEventIdError', eventId: id } });
      expect(await store.recordedEventIds([id])).toEqual(new Set([id]));
      expect((await store.readStream(x)).length + (await store.readStream(y)).length).toBe(1);
    }
  });
});

import * as E from 'fp-ts/lib/Either.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { PostgresSnapshotStore } from '../../src/adapters/postgres/postgres-snapshot-store.js';
import { keyEventId } from '../../src/commands/enqueue.js';
import { KeyCommandHandler } from '../../src/commands/key-command-handler.js';
import { EventDecodeError, KEY_STATE_SCHEMA_VERSION, decodeRecorded } from '../../src/commands/key-state-loader.js';
import { fold, holders, initialKeyState, jobsIn, type KeyState } from '../../src/domain/key-state.js';
import type { RecordedEvent } from '../../src/domain/ports/event-store.js';
import { keyStream } from '../../src/domain/streams.js';
import { ValidationError } from '../../src/domain/values.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

let db: MigratedDatabase;
let pool: pg.Pool;
let ledger: Ledger;

beforeAll(async () => {
  db = await createMigratedDatabase(30);
  pool = db.pool;
  ledger = await createLedger({ pool, migrate: false });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

const newLedger = (p = pool) => createLedger({ pool: p, migrate: false });

const eventsOf = async (stream: string): Promise<RecordedEvent[]> => new PostgresEventStore(pool).readStream(stream);

/** The limit is checked after every event of the stream, not only at the end. */
const expectLimitHeldThroughout = (events: readonly RecordedEvent[]): KeyState => {
  let state = initialKeyState;
  for (const e of events) {
    state = fold(state, [decodeRecorded(e)]);
    if (e.type === 'SlotAcquired' || e.type === 'JobPromoted') expect(holders(state).length).toBeLessThanOrEqual(state.limit);
  }
  return state;
};

const expectContiguous = (events: readonly RecordedEvent[]) => expect(events.map((e) => e.revision)).toEqual(events.map((_, i) => i));

describe('concurrent enqueuers on one key (FAILURE-MODES #15: over-admission during a brief race)', () => {
  it('20 enqueuers, each with its own handler and cache, on a limit-3 key: exactly 3 holders and 17 parked', async () => {
    const key = 'race:one-pool';
    const ledgers = await Promise.all(Array.from({ length: 20 }, () => newLedger()));
    await Promise.all(ledgers.map((l, i) => l.enqueue({ name: 'work', key, limit: 3, jobId: `one-pool-${i}` })));
    await Promise.all(ledgers.map((l) => l.close()));

    const events = await eventsOf(keyStream(key));
    expectContiguous(events);
    const state = expectLimitHeldThroughout(events);
    expect(holders(state)).toHaveLength(3);
    expect(jobsIn(state, 'parked')).toHaveLength(17);
    // no event lost or duplicated: one enqueue and one admission decision per job, one limit
    const enqueued = events.filter((e) => e.type === 'JobEnqueued').map((e) => e.data.jobId);
    expect(new Set(enqueued).size).toBe(20);
    expect(enqueued).toHaveLength(20);
    expect(events.filter((e) => e.type === 'SlotAcquired')).toHaveLength(3);
    expect(events.filter((e) => e.type === 'JobParked')).toHaveLength(17);
    expect(events.filter((e) => e.type === 'KeyLimitSet')).toHaveLength(1);
  });

  it('the same through 5 separate pg pools, as if 5 processes', async () => {
    const key = 'race:five-pools';
    const pools = Array.from({ length: 5 }, () => new pg.Pool({ connectionString: db.url, max: 4 }));
    try {
      const ledgers = await Promise.all(pools.flatMap((p) => Array.from({ length: 4 }, () => newLedger(p))));
      await Promise.all(ledgers.map((l, i) => l.enqueue({ name: 'work', key, limit: 3, jobId: `five-pools-${i}` })));
      await Promise.all(ledgers.map((l) => l.close()));
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
    const events = await eventsOf(keyStream(key));
    expectContiguous(events);
    const state = expectLimitHeldThroughout(events);
    expect(holders(state)).toHaveLength(3);
    expect(jobsIn(state, 'parked')).toHaveLength(17);
    expect(events).toHaveLength(1 + 20 + 20);
  });

  it('concurrent workers starting and completing while enqueuers add jobs never exceed the limit, and nothing is stranded', async () => {
    const key = 'race:churn';
    const jobs = 40;
    const enqueuers = await Promise.all(Array.from({ length: 4 }, () => newLedger()));
    const workers = await Promise.all(Array.from({ length: 6 }, () => newLedger()));
    const enqueueing = Promise.all(
      enqueuers.map(async (l, w) => {
        for (let i = w; i < jobs; i += enqueuers.length) await l.enqueue({ name: 'work', key, limit: 2, jobId: `churn-${i}` });
      }),
    );
    const done = new Set<string>();
    let enqueued = false;
    void enqueueing.then(() => (enqueued = true));
    // Each worker picks a holder it did not start yet and races the others to start it;
    // the loser's Start is refused (AlreadyStarted or StaleLease), never run twice.
    const working = Promise.all(
      workers.map(async (l, w) => {
        while (done.size < jobs) {
          const { state } = await l.keyState(key);
          const free = holders(state).filter((j) => j.lease?.workerId === null);
          const pick = free[w % Math.max(1, free.length)];
          if (!pick?.lease) {
            if (enqueued && holders(state).length === 0 && jobsIn(state, 'parked').length === 0) break;
            await new Promise((r) => setTimeout(r, 2));
            continue;
          }
          const leaseId = pick.lease.leaseId;
          const start = await l.execute(keyStream(key), { type: 'Start', jobId: pick.jobId, leaseId, workerId: `w${w}` });
          if (E.isLeft(start)) continue;
          const complete = await l.execute(keyStream(key), { type: 'Complete', jobId: pick.jobId, leaseId });
          expect(E.isRight(complete)).toBe(true);
          expect(done.has(pick.jobId)).toBe(false);
          done.add(pick.jobId);
        }
      }),
    );
    await Promise.all([enqueueing, working]);
    await Promise.all([...enqueuers, ...workers].map((l) => l.close()));

    const events = await eventsOf(keyStream(key));
    expectContiguous(events);
    const state = expectLimitHeldThroughout(events);
    expect(done.size).toBe(jobs);
    expect(Object.keys(state.jobs)).toEqual([]);
    expect(events.filter((e) => e.type === 'JobCompleted')).toHaveLength(jobs);
    expect(events.filter((e) => e.type === 'JobStarted')).toHaveLength(jobs);
    // a lease is released at most once
    const releases = events.filter((e) => e.type === 'SlotReleased').map((e) => e.data.leaseId);
    expect(new Set(releases).size).toBe(releases.length);
  });
});

describe('enqueue', () => {
  it('reports acquired, parked and scheduled', async () => {
    const key = 'status';
    expect(await ledger.enqueue({ name: 'a', key, limit: 1, jobId: 'st-1' })).toEqual({ jobId: 'st-1', stream: 'key:status', status: 'acquired' });
    expect((await ledger.enqueue({ name: 'a', key, jobId: 'st-2' })).status).toBe('parked');
    expect((await ledger.enqueue({ name: 'a', key, jobId: 'st-3', delayMs: 60_000 })).status).toBe('scheduled');
  });

  it('is idempotent by jobId: a retried enqueue records nothing new, even after the job finished', async () => {
    const key = 'idem';
    await ledger.enqueue({ name: 'a', key, limit: 1, jobId: 'idem-1' });
    expect((await ledger.enqueue({ name: 'a', key, limit: 1, jobId: 'idem-1' })).status).toBe('duplicate');
    const stream = keyStream(key);
    await ledger.execute(stream, { type: 'Start', jobId: 'idem-1', leaseId: 'idem-1:1', workerId: 'w' });
    await ledger.execute(stream, { type: 'Complete', jobId: 'idem-1', leaseId: 'idem-1:1' });
    const before = await eventsOf(stream);
    expect((await ledger.enqueue({ name: 'a', key, limit: 1, jobId: 'idem-1' })).status).toBe('duplicate');
    // a fresh process (no cache) too
    const other = await newLedger();
    expect((await other.enqueue({ name: 'a', key, limit: 1, jobId: 'idem-1' })).status).toBe('duplicate');
    await other.close();
    expect(await eventsOf(stream)).toEqual(before);
  });

  it('10 concurrent enqueues of one job id, on its key and on another key, record it once', async () => {
    const ledgers = await Promise.all(Array.from({ length: 10 }, () => newLedger()));
    const results = await Promise.all(ledgers.map((l, i) => l.enqueue({ name: 'a', key: i % 2 ? 'same-id:x' : 'same-id:y', limit: 1, jobId: 'same-id' })));
    await Promise.all(ledgers.map((l) => l.close()));
    expect(results.filter((r) => r.status !== 'duplicate')).toHaveLength(1);
    const { rows } = await pool.query(`SELECT count(*)::int AS n FROM events WHERE type = 'JobEnqueued' AND data->>'jobId' = 'same-id'`);
    expect(rows[0].n).toBe(1);
  });

  it('a batch over several keys is one transaction, each key admitted against its own limit', async () => {
    const results = await ledger.enqueueMany([
      { name: 'a', key: 'batch:x', limit: 1, jobId: 'bx-1' },
      { name: 'a', key: 'batch:y', limit: 2, jobId: 'by-1' },
      { name: 'a', key: 'batch:x', limit: 1, jobId: 'bx-2' },
      { name: 'a', key: 'batch:y', limit: 2, jobId: 'by-2' },
      { name: 'a', key: 'batch:y', limit: 2, jobId: 'by-3' },
      { name: 'a', jobId: 'b-unkeyed' },
    ]);
    expect(results.map((r) => r.status)).toEqual(['acquired', 'acquired', 'parked', 'acquired', 'parked', 'acquired']);
    const all = [...(await eventsOf('key:batch:x')), ...(await eventsOf('key:batch:y')), ...(await eventsOf('job:b-unkeyed'))];
    expect(new Set(all.map((e) => e.position.commit)).size).toBe(1);
  });
});

describe('bad input changes nothing', () => {
  it.each([
    ['name', { name: '', key: 'bad' }],
    ['key', { name: 'x', key: '' }],
    ['limit', { name: 'x', key: 'bad', limit: 0 }],
    ['leaseMs', { name: 'x', key: 'bad', leaseMs: 10 }],
    ['args', { name: 'x', key: 'bad', args: { f: () => 1 } }],
    ['args', { name: 'x', key: 'bad', args: { n: 1n } }],
    ['priority', { name: 'x', key: 'bad', priority: 1.5 }],
    ['runAt', { name: 'x', key: 'bad', runAt: 'not a time' }],
  ])('a bad %s is refused with its name, and nothing is appended', async (field, input) => {
    const before = await pool.query('SELECT count(*)::int AS n FROM events');
    const error = await ledger.enqueue(input as never).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe(field);
    expect((error as Error).message).toMatch(new RegExp(`^${field}: `));
    expect(await eventsOf(keyStream('bad'))).toEqual([]);
    expect((await pool.query('SELECT count(*)::int AS n FROM events')).rows).toEqual(before.rows);
  });

  it('one bad job in a batch refuses the whole batch, naming its index', async () => {
    const error = await ledger.enqueueMany([{ name: 'ok', key: 'bad-batch' }, { name: 'x', key: 'bad-batch', limit: -1 }]).catch((e: unknown) => e);
    expect((error as ValidationError).field).toBe('jobs[1].limit');
    expect(await eventsOf(keyStream('bad-batch'))).toEqual([]);
  });

  it('a command that fails its codec is refused before anything is read or written', async () => {
    const error = await ledger.execute(keyStream('bad-cmd'), { type: 'SetLimit', limit: 0, by: 'ops' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('limit');
    expect(await eventsOf(keyStream('bad-cmd'))).toEqual([]);
  });
});

describe('an event that does not decode', () => {
  it('fails the load with an error naming the stream and revision; it is never skipped', async () => {
    const stream = keyStream('corrupt');
    await ledger.enqueue({ name: 'a', key: 'corrupt', limit: 1, jobId: 'corrupt-1' });
    const store = new PostgresEventStore(pool);
    await store.append(stream, 2, [{ type: 'SlotAcquired', data: { jobId: 'corrupt-1', leaseId: 42 } }]);
    const fresh = await newLedger();
    const error = await fresh.keyState('corrupt').catch((e: unknown) => e);
    await fresh.close();
    expect(error).toBeInstanceOf(EventDecodeError);
    expect(error).toMatchObject({ stream, revision: 3 });
    expect((error as Error).message).toContain('"key:corrupt" revision 3');
  });
});

describe('snapshots and the cache', () => {
  const handlerOn = (snapshotEvery: number) => {
    const store = new PostgresEventStore(pool);
    const reads: number[] = [];
    const counting = Object.create(store) as PostgresEventStore;
    // how many events each load read: the delta after the cache or snapshot
    counting.readStreams = async (requests) => {
      const read = await store.readStreams(requests);
      for (const events of read.values()) reads.push(events.length);
      return read;
    };
    return { handler: new KeyCommandHandler({ store: counting, snapshots: new PostgresSnapshotStore(pool) }, { snapshotEvery, eventId: keyEventId }), reads };
  };

  const churn = async (handler: KeyCommandHandler, stream: string, n: number, prefix = stream) => {
    for (let i = 0; i < n; i++) {
      const jobId = `${prefix}-${i}`;
      await handler.execute(stream, { type: 'Enqueue', limit: 1, job: { jobId, name: 'a', args: null, queue: 'default', priority: 0, maxAttempts: 3, runAt: null } });
      const { state } = await handler.load(stream);
      const leaseId = state.jobs[jobId]!.lease!.leaseId;
      await handler.execute(stream, { type: 'Start', jobId, leaseId, workerId: 'w' });
      await handler.execute(stream, { type: 'Complete', jobId, leaseId });
    }
  };

  it('saves a snapshot every N events, and a new process loads it plus only the delta', async () => {
    const stream = keyStream('snap');
    const { handler } = handlerOn(10);
    // the first cycle writes 6 events (with KeyLimitSet), each later one 5: 6 + 4 * 5 = 26
    await churn(handler, stream, 5);
    const snapshotAt = async () => (await pool.query('SELECT revision::int AS revision, schema_version FROM snapshots WHERE stream = $1', [stream])).rows;
    // the 4th cycle's Complete takes the stream from 19 to 21 events: a snapshot at its last revision, 20
    expect(await snapshotAt()).toEqual([{ revision: 20, schema_version: KEY_STATE_SCHEMA_VERSION }]);

    const fresh = handlerOn(10);
    const loaded = await fresh.handler.load(stream);
    expect(fresh.reads).toEqual([5]); // revisions 21..25 only
    const all = await eventsOf(stream);
    expect(all).toHaveLength(26);
    expect(loaded).toEqual({ state: fold(initialKeyState, all.map(decodeRecorded)), revision: 25 });
  });

  it('the cache still reads the delta: a write by another process is seen', async () => {
    const stream = keyStream('cache');
    const a = handlerOn(0);
    const b = handlerOn(0);
    await churn(a.handler, stream, 1, 'cache-a');
    await churn(b.handler, stream, 1, 'cache-b');
    const before = await a.handler.load(stream);
    expect(before.revision).toBe(10); // 6 events by a, 5 by b
    a.reads.length = 0;
    await a.handler.load(stream);
    expect(a.reads).toEqual([0]); // nothing new: the cached state plus an empty delta
  });

  it('a snapshot of another schema version, or one that does not decode, is ignored', async () => {
    const stream = keyStream('snap-other');
    await churn(handlerOn(0).handler, stream, 2);
    await new PostgresSnapshotStore(pool).save({ stream, revision: 5, schemaVersion: KEY_STATE_SCHEMA_VERSION + 1, state: { anything: true } });
    const expected = fold(initialKeyState, (await eventsOf(stream)).map(decodeRecorded));
    expect((await handlerOn(0).handler.load(stream)).state).toEqual(expected);
    await pool.query('DELETE FROM snapshots WHERE stream = $1', [stream]);
    await new PostgresSnapshotStore(pool).save({ stream, revision: 5, schemaVersion: KEY_STATE_SCHEMA_VERSION, state: { limit: 'one' } });
    expect((await handlerOn(0).handler.load(stream)).state).toEqual(expected);
  });
});

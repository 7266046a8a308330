// What the contract cannot say about the PostgreSQL adapter: inline handlers, the xmin rule of
// readAll, the retries that keep global order and survive deadlocks, and its notifications.
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EVENTS_CHANNEL,
  PostgresEventStore,
  type InlineHandler,
} from '../../../src/adapters/eventstore/postgres/postgres-event-store.js';
import type { EventToAppend, RecordedEvent } from '../../../src/domain/ports/event-store.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/database.js';
import { heldAppend } from '../../support/held-append.js';

const event = (type: string): EventToAppend & { eventId: string } => ({ type, data: { type }, eventId: randomUUID() });
const uniquePrefix = (): string => `p${randomBytes(5).toString('hex')}-`;

async function until<T>(probe: () => Promise<T>, done: (value: T) => boolean, what: string, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

describe('PostgresEventStore', () => {
  let db: MigratedDatabase;
  let pool: pg.Pool;
  let store: PostgresEventStore;

  beforeAll(async () => {
    db = await createMigratedDatabase(8);
    pool = db.pool;
    store = new PostgresEventStore(pool);
  });
  afterAll(async () => {
    await store.close();
    await db.drop();
  });

  const typesInReadAll = async (prefix: string): Promise<string[]> =>
    (await store.readAll({ streamPrefix: prefix })).map((e) => e.type);

  describe('inline handlers', () => {
    it('run inside the append transaction with its events in global order, and commit with it', async () => {
      const p = uniquePrefix();
      await pool.query('CREATE TABLE inline_seen (event_id uuid PRIMARY KEY, revision int, in_table boolean)');
      const calls: RecordedEvent[][] = [];
      const handler: InlineHandler = async (client, events) => {
        calls.push([...events]);
        for (const e of events) {
          await client.query(
            `INSERT INTO inline_seen SELECT $1, $2, EXISTS (SELECT FROM events WHERE event_id = $1)`,
            [e.eventId, e.revision],
          );
        }
      };
      const inline = new PostgresEventStore(pool, { inlineHandlers: [handler] });
      await inline.append(`${p}b`, 'no_stream', [event('B0')]);
      const written = [event('A0'), event('A1'), event('B1')];
      const results = await inline.appendMany([
        { stream: `${p}b`, expected: 0, events: [written[2]!] },
        { stream: `${p}a`, expected: 'no_stream', events: [written[0]!, written[1]!] },
      ]);

      expect(calls).toHaveLength(2);
      const batch = calls[1]!;
      expect(batch.map((e) => [e.stream, e.revision, e.type])).toEqual([
        [`${p}a`, 0, 'A0'],
        [`${p}a`, 1, 'A1'],
        [`${p}b`, 1, 'B1'],
      ]);
      // What the handler got is what a reader gets.
      const read = [...(await store.readStream(`${p}a`)), ...(await store.readStream(`${p}b`, { fromRevision: 1 }))];
      expect(batch).toEqual(read);
      expect(results.map((r) => r.position)).toEqual([batch[2]!.position, batch[1]!.position]);
      const { rows } = await pool.query('SELECT count(*)::int AS n FROM inline_seen WHERE in_table');
      expect(rows[0].n).toBe(4);
    });

    it('roll the whole append back when one throws', async () => {
      const p = uniquePrefix();
      await pool.query('CREATE TABLE inline_effects (stream text)');
      const failure = new Error('projection failed');
      const inline = new PostgresEventStore(pool, {
        inlineHandlers: [
          async (client, events) => {
            await client.query('INSERT INTO inline_effects VALUES ($1)', [events[0]!.stream]);
          },
          async () => {
            throw failure;
          },
        ],
      });
      await expect(inline.append(`${p}s`, 'no_stream', [event('E0')])).rejects.toBe(failure);
      await expect(
        inline.appendMany([
          { stream: `${p}s`, expected: 'no_stream', events: [event('E0')] },
          { stream: `${p}t`, expected: 'no_stream', events: [event('T0')] },
        ]),
      ).rejects.toBe(failure);

      expect(await store.readStream(`${p}s`)).toEqual([]);
      expect(await store.readStream(`${p}t`)).toEqual([]);
      const { rows } = await pool.query(
        'SELECT (SELECT count(*)::int FROM streams WHERE starts_with(stream, $1)) AS streams, (SELECT count(*)::int FROM inline_effects) AS effects',
        [p],
      );
      expect(rows[0]).toEqual({ streams: 0, effects: 0 });
      // The stream is still new: the failed appends left no trace of it.
      await store.append(`${p}s`, 'no_stream', [event('E0')]);
    });

    it('run again when their transaction is chosen as a deadlock victim, and both appends land', async () => {
      const p = uniquePrefix();
      await pool.query('CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL)');
      await pool.query('INSERT INTO counters VALUES (1, 0), (2, 0)');
      let calls = 0;
      let firstLocks = 0;
      let bothLocked!: () => void;
      const barrier = new Promise<void>((resolve) => (bothLocked = resolve));
      // Stream a updates counter 1 then 2, stream b the other way round, each waiting until
      // the other holds its first row: a certain deadlock on the first attempt.
      const inline = new PostgresEventStore(pool, {
        inlineHandlers: [
          async (client, events) => {
            calls++;
            const order = events[0]!.stream.endsWith('a') ? [1, 2] : [2, 1];
            await client.query('UPDATE counters SET n = n + 1 WHERE id = $1', [order[0]]);
            if (++firstLocks === 2) bothLocked();
            await barrier;
            await client.query('UPDATE counters SET n = n + 1 WHERE id = $1', [order[1]]);
          },
        ],
      });
      const results = await Promise.all([
        inline.append(`${p}a`, 'no_stream', [event('A')]),
        inline.append(`${p}b`, 'no_stream', [event('B')]),
      ]);
      expect(results.map((r) => r.nextExpectedRevision)).toEqual([0, 0]);
      // At least one re-run: PostgreSQL picks a victim per deadlock, and a loaded machine may see
      // the retry collide again; the rows show that each committed append ran its handler once.
      expect(calls).toBeGreaterThanOrEqual(3);
      const { rows } = await pool.query('SELECT n FROM counters ORDER BY id');
      expect(rows).toEqual([{ n: 2 }, { n: 2 }]);
    });
  });

  describe('readAll', () => {
    it('returns nothing past an open transaction, then everything once it commits', async () => {
      const p = uniquePrefix();
      await store.append(`${p}early`, 'no_stream', [event('Early')]);
      const held = heldAppend(pool, `${p}held`, event('Held'));
      await held.written;
      await store.append(`${p}later`, 'no_stream', [event('Later')]);

      await until(() => typesInReadAll(p), (types) => types.includes('Early'), 'the early event');
      for (let i = 0; i < 5; i++) {
        // 'Later' is committed and readable by readStream, but an older transaction is still open.
        expect(await typesInReadAll(p)).toEqual(['Early']);
        expect(await store.readStream(`${p}later`)).toHaveLength(1);
        await sleep(40);
      }

      await held.commit();
      const types = await until(() => typesInReadAll(p), (t) => t.length === 3, 'all three events');
      expect(types).toEqual(['Early', 'Held', 'Later']);
    });

    it('orders transaction ids as numbers, also where they gain a digit', async () => {
      const p = uniquePrefix();
      // Rows as transactions 10 and 9 would have written them (ids long past on any server).
      await pool.query(
        `INSERT INTO events (transaction_id, stream, stream_revision, type, data, event_id)
         VALUES ('10', $1, 1, 'Ten', '{}', gen_random_uuid()), ('9', $1, 0, 'Nine', '{}', gen_random_uuid())`,
        [`${p}s`],
      );
      const all = await store.readAll({ streamPrefix: p });
      expect(all.map((e) => [e.type, e.position.commit])).toEqual([
        ['Nine', 9n],
        ['Ten', 10n],
      ]);
      expect((await store.readAll({ streamPrefix: p, maxCount: 1 })).map((e) => e.type)).toEqual(['Nine']);
      expect((await store.readAll({ streamPrefix: p, after: all[0]!.position })).map((e) => e.type)).toEqual(['Ten']);
    });

    it("keeps a stream's events in revision order when a batch's transaction is older than the stream's last writer", async () => {
      const p = uniquePrefix();
      await store.append(`${p}a`, 'no_stream', [event('A0')]);
      await store.append(`${p}b`, 'no_stream', [event('B0')]);
      // Hold stream a's row so the batch below takes its transaction id on a, then waits.
      const locker = await pool.connect();
      try {
        await locker.query('BEGIN');
        await locker.query('SELECT FROM streams WHERE stream = $1 FOR UPDATE', [`${p}a`]);
        const batch = store.appendMany([
          { stream: `${p}a`, expected: 0, events: [event('A1')] },
          { stream: `${p}b`, expected: 1, events: [event('B2')] },
        ]);
        await until(
          async () =>
            (
              await pool.query(
                `SELECT count(*)::int AS n FROM pg_locks JOIN pg_stat_activity USING (pid)
                 WHERE NOT granted AND datname = current_database()`,
              )
            ).rows[0].n,
          (n) => n > 0,
          'the batch to wait for the lock',
        );
        // A younger transaction moves b on and commits while the batch waits.
        await store.append(`${p}b`, 0, [event('B1')]);
        await locker.query('COMMIT');
        expect((await batch).map((r) => r.nextExpectedRevision)).toEqual([1, 2]);
      } finally {
        locker.release();
      }

      const all = await until(() => store.readAll({ streamPrefix: `${p}b` }), (e) => e.length === 3, 'stream b');
      expect(all.map((e) => [e.type, e.revision])).toEqual([
        ['B0', 0],
        ['B1', 1],
        ['B2', 2],
      ]);
    });
  });

  describe('notifications', () => {
    it(`notify ${EVENTS_CHANNEL} with the stream name at commit`, async () => {
      const p = uniquePrefix();
      const listener = new pg.Client({ connectionString: db.url });
      await listener.connect();
      try {
        const payloads: (string | undefined)[] = [];
        listener.on('notification', (message) => payloads.push(message.payload));
        await listener.query(`LISTEN ${EVENTS_CHANNEL}`);
        await store.appendMany([
          { stream: `${p}x`, expected: 'no_stream', events: [event('X')] },
          { stream: `${p}y`, expected: 'no_stream', events: [event('Y0'), event('Y1')] },
        ]);
        await until(async () => payloads.length, (n) => n >= 2, 'two notifications');
        expect(payloads.sort()).toEqual([`${p}x`, `${p}y`]);
        await expect(store.append(`${p}x`, 5, [event('Refused')])).rejects.toThrow();
        await sleep(100);
        expect(payloads).toHaveLength(2);
      } finally {
        await listener.end();
      }
    });

    it('wake a subscriber at once, also after its listening connection was killed', async () => {
      const p = uniquePrefix();
      const seen: string[] = [];
      // With an hour between polls, only a notification can bring an event in.
      const subscription = store.subscribe({ streamPrefix: p, pollIntervalMs: 3_600_000 }, async (events) => {
        seen.push(...events.map((e) => e.type));
      });
      const listening = async () =>
        (
          await pool.query<{ pid: number }>(
            `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = $1`,
            [`LISTEN "${EVENTS_CHANNEL}"`],
          )
        ).rows.map((row) => row.pid);
      const listenerPid = () => until(listening, (pids) => pids.length === 1, 'one listening connection');
      // An open transaction elsewhere on the server (another test's) can leave a notified event
      // unreadable for a moment, so append until one gets through: any delivery was a wake-up.
      const appendUntilSeen = async (type: string): Promise<void> => {
        for (let attempt = 0; attempt < 20; attempt++) {
          await store.append(`${p}s`, 'any', [event(type)]);
          for (let waited = 0; waited < 500; waited += 20) {
            if (seen.includes(type)) return;
            await sleep(20);
          }
        }
        throw new Error(`no notification brought ${type} in`);
      };
      const [first] = await listenerPid();
      await appendUntilSeen('BeforeKill');

      await pool.query('SELECT pg_terminate_backend($1)', [first]);
      await until(listenerPid, (pids) => pids[0] !== first, 'a new listening connection');
      // The reconnection itself triggers a read; let it finish before appending.
      await sleep(200);
      await appendUntilSeen('AfterKill');
      expect(new Set(seen)).toEqual(new Set(['BeforeKill', 'AfterKill']));

      await subscription.stop();
      await until(listening, (pids) => pids.length === 0, 'the listening connection to close');
    });

    it('are only a hint: a subscriber polls in an event that was unreadable when notified', async () => {
      const p = uniquePrefix();
      const seen: string[] = [];
      // An open transaction with an id, writing no event and so notifying nothing at commit.
      const older = await pool.connect();
      try {
        await older.query('BEGIN');
        await older.query('SELECT pg_current_xact_id()');
        const subscription = store.subscribe({ streamPrefix: p, pollIntervalMs: 200 }, async (events) => {
          seen.push(...events.map((e) => e.type));
        });
        await store.append(`${p}s`, 'no_stream', [event('Notified')]);
        await sleep(300);
        expect(seen).toEqual([]);
        await older.query('COMMIT');
        await until(async () => seen.length, (n) => n === 1, 'the polled event');
        await subscription.stop();
      } finally {
        older.release();
      }
    });
  });
});

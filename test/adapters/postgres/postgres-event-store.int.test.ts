// What the contract cannot say about the PostgreSQL adapter: inline projections, the xmin rule of
// readAll, the retries that keep global order and survive deadlocks, and its notifications.
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS_CHANNEL, PostgresEventStore } from '../../../src/adapters/eventstore/postgres/postgres-event-store.js';
import type { EventToAppend } from '../../../src/domain/ports/event-store.js';
import { statement, type ProjectedEvent, type Projection, type Statement } from '../../../src/projections/projection.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/database.js';
import { heldAppend } from '../../support/held-append.js';
import { until } from '../../support/until.js';

const event = (type: string): EventToAppend & { eventId: string } => ({ type, data: { type }, eventId: randomUUID() });
const uniquePrefix = (): string => `p${randomBytes(5).toString('hex')}-`;


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

  // A projection over the test's own streams: its events must be the key decider's events
  // (the store decodes what it projects), so the tests append KeyLimitSet events.
  const limitEvent = (limit: number): EventToAppend & { eventId: string } => ({ type: 'KeyLimitSet', data: { limit, leaseMs: 1_000, by: null, at: Date.now() }, eventId: randomUUID() });
  const projection = (name: string, prefix: string, project: (events: readonly ProjectedEvent[]) => Statement[]): Projection => ({
    name,
    handles: (stream) => stream.startsWith(prefix),
    project,
  });

  describe('inline projections', () => {
    it('run inside the append transaction, on every event of it in global order, and commit with it', async () => {
      const p = uniquePrefix();
      await pool.query('CREATE TABLE inline_seen (stream text, revision int, limit_ int, in_table boolean)');
      const batches: string[][] = [];
      const inline = new PostgresEventStore(pool, {
        inline: [
          projection('seen', p, (events) => {
            batches.push(events.map((e) => `${e.stream}/${e.revision}`));
            return events.map((e) =>
              statement(
                `INSERT INTO inline_seen SELECT $1::text, $2::int, $3::int, EXISTS (SELECT FROM events WHERE stream = $1::text AND stream_revision = $2::int)`,
                e.stream,
                e.revision,
                e.event.type === 'KeyLimitSet' ? e.event.data.limit : null,
              ),
            );
          }),
        ],
      });
      await inline.append(`${p}b`, 'no_stream', [limitEvent(1)]);
      await inline.appendMany([
        { stream: `${p}b`, expected: 0, events: [limitEvent(2)] },
        { stream: `${p}a`, expected: 'no_stream', events: [limitEvent(3), limitEvent(4)] },
      ]);
      expect(batches).toEqual([[`${p}b/0`], [`${p}b/1`, `${p}a/0`, `${p}a/1`]]);
      const { rows } = await pool.query('SELECT stream, revision, limit_ AS limit, in_table FROM inline_seen ORDER BY stream, revision');
      expect(rows).toEqual([
        { stream: `${p}a`, revision: 0, limit: 3, in_table: true },
        { stream: `${p}a`, revision: 1, limit: 4, in_table: true },
        { stream: `${p}b`, revision: 0, limit: 1, in_table: true },
        { stream: `${p}b`, revision: 1, limit: 2, in_table: true },
      ]);
    });

    it('roll the whole append back when one of their statements fails', async () => {
      const p = uniquePrefix();
      await pool.query('CREATE TABLE inline_effects (stream text)');
      const inline = new PostgresEventStore(pool, {
        inline: [
          projection('effects', p, (events) => [statement('INSERT INTO inline_effects VALUES ($1)', events[0]!.stream)]),
          projection('failing', p, () => [statement('SELECT 1 / 0')]),
        ],
      });
      await expect(inline.append(`${p}s`, 'no_stream', [limitEvent(1)])).rejects.toThrow(/division by zero/);
      await expect(
        inline.appendMany([
          { stream: `${p}s`, expected: 'no_stream', events: [limitEvent(1)] },
          { stream: `${p}t`, expected: 'no_stream', events: [limitEvent(1)] },
        ]),
      ).rejects.toThrow(/division by zero/);
      expect(await store.readStream(`${p}s`)).toEqual([]);
      expect(await store.readStream(`${p}t`)).toEqual([]);
      const { rows } = await pool.query(
        'SELECT (SELECT count(*)::int FROM streams WHERE starts_with(stream, $1)) AS streams, (SELECT count(*)::int FROM inline_effects) AS effects',
        [p],
      );
      expect(rows[0]).toEqual({ streams: 0, effects: 0 });
      // The stream is still new: the failed appends left no trace of it.
      await store.append(`${p}s`, 'no_stream', [limitEvent(1)]);
    });

    it('refuse an event of a handled stream that is not the decider\'s (it does not decode), writing nothing', async () => {
      const p = uniquePrefix();
      const inline = new PostgresEventStore(pool, { inline: [projection('any', p, () => [])] });
      await expect(inline.append(`${p}s`, 'no_stream', [event('NotAKeyEvent')])).rejects.toThrow(/does not decode/);
      expect(await store.readStream(`${p}s`)).toEqual([]);
    });

    it('run again when their transaction is chosen as a deadlock victim, and both appends land', async () => {
      const p = uniquePrefix();
      await pool.query('CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL)');
      await pool.query('INSERT INTO counters VALUES (1, 0), (2, 0)');
      // Stream a updates counter 1 then 2, stream b the other way round, each pausing between
      // them long enough for the other to hold its first row: a deadlock on the first attempt.
      const inline = new PostgresEventStore(pool, {
        inline: [
          projection('counters', p, (events) => {
            const order = events[0]!.stream.endsWith('a') ? [1, 2] : [2, 1];
            return [
              statement('UPDATE counters SET n = n + 1 WHERE id = $1', order[0]),
              statement('SELECT pg_sleep(0.3)'),
              statement('UPDATE counters SET n = n + 1 WHERE id = $1', order[1]),
            ];
          }),
        ],
      });
      const rolledBack = async () => Number((await pool.query('SELECT xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()')).rows[0].n);
      const before = await rolledBack();
      const results = await Promise.all([inline.append(`${p}a`, 'no_stream', [limitEvent(1)]), inline.append(`${p}b`, 'no_stream', [limitEvent(1)])]);
      expect(results.map((r) => r.nextExpectedRevision)).toEqual([0, 0]);
      // Each committed append applied its projection once; the victim's first try was undone.
      const { rows } = await pool.query('SELECT n FROM counters ORDER BY id');
      expect(rows).toEqual([{ n: 2 }, { n: 2 }]);
      await pool.query('SELECT pg_stat_force_next_flush()').catch(() => undefined);
      await until(rolledBack, (n) => n > before, 'the deadlock victim to be counted');
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
        `INSERT INTO appends (transaction_id, stream, revision, types, ids, data)
         VALUES ('10', $1, 1, ARRAY['Ten'], ARRAY[gen_random_uuid()], '[{}]'), ('9', $1, 0, ARRAY['Nine'], ARRAY[gen_random_uuid()], '[{}]')`,
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
    it(`notify ${EVENTS_CHANNEL} once per appending transaction, at its commit, and never for a refused one`, async () => {
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
        await until(async () => payloads.length, (n) => n >= 1, 'a notification');
        await sleep(100);
        // One for the transaction, whatever it wrote: a subscriber reads from its position anyway.
        expect(payloads).toEqual(['']);
        await expect(store.append(`${p}x`, 5, [event('Refused')])).rejects.toThrow();
        await sleep(100);
        expect(payloads).toHaveLength(1);
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

import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InvalidQueueNameError, PgQueue, QUEUE_CHANNEL, type QueueMessage } from '../../../src/adapters/queue/pg-queue.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/database.js';
import { until } from '../../support/until.js';


/** Counts calls; `next()` resolves at the next call after it was asked. */
function wakeCounter() {
  let calls = 0;
  let waiters: (() => void)[] = [];
  return {
    wake: () => {
      calls += 1;
      const ready = waiters;
      waiters = [];
      for (const resolve of ready) resolve();
    },
    get calls() {
      return calls;
    },
    next: (timeoutMs = 10_000) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('no wake-up')), timeoutMs);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}

describe('PgQueue', () => {
  let db: MigratedDatabase;
  let toDrop: MigratedDatabase | undefined; // unset when beforeEach failed
  let queue: PgQueue;
  const cleanups: (() => Promise<unknown>)[] = [];

  beforeEach(async () => {
    db = toDrop = await createMigratedDatabase(12);
    queue = new PgQueue(db.pool);
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    await toDrop?.drop();
    toDrop = undefined;
  });

  function extraPool(max = 1, config: pg.PoolConfig = {}): pg.Pool {
    const pool = new pg.Pool({ connectionString: db.url, max, ...config });
    pool.on('error', () => undefined);
    cleanups.push(() => pool.end());
    return pool;
  }

  async function inTransaction<T>(fn: (client: pg.PoolClient) => Promise<T>, outcome: 'COMMIT' | 'ROLLBACK'): Promise<T> {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const result = await fn(client);
      await client.query(outcome);
      return result;
    } finally {
      client.release();
    }
  }

  const count = async (sql: string, values: unknown[] = []): Promise<number> =>
    Number((await db.pool.query<{ n: string }>(sql, values)).rows[0]!.n);
  const inQueue = (msgId: string) => count('SELECT count(*) AS n FROM queue_messages WHERE msg_id = $1', [msgId]);
  const inArchive = (msgId: string) => count('SELECT count(*) AS n FROM queue_archive WHERE msg_id = $1', [msgId]);

  it('sends and reads JSON messages in order, ids increasing along the batch', async () => {
    const values = ['text', 42, null, { a: [1, { b: true }] }, [1, 2], undefined];
    const ids = await queue.sendBatch('jobs', values);
    expect(ids).toHaveLength(6);
    expect(ids.map(BigInt)).toEqual([...ids.map(BigInt)].sort((a, b) => (a < b ? -1 : 1)));
    const single = await queue.send('jobs', { last: true });
    expect(BigInt(single)).toBeGreaterThan(BigInt(ids[5]!));

    const read = await queue.read('jobs', 30_000, 100);
    expect(read.map((m) => m.msgId)).toEqual([...ids, single]);
    expect(read.map((m) => m.message)).toEqual([...values.slice(0, 5), null, { last: true }]);
    for (const m of read) {
      expect(m.readCt).toBe(1);
      expect(m.enqueuedAt).toBeInstanceOf(Date);
      expect(m.vt.getTime() - Date.now()).toBeGreaterThan(20_000);
    }
    expect(await queue.read('jobs', 30_000, 100)).toEqual([]);
    expect(await queue.sendBatch('jobs', [])).toEqual([]);
  });

  it('create is idempotent; a send creates its queue', async () => {
    await queue.create('a');
    await queue.create('a');
    await queue.send('b', 1);
    const { rows } = await db.pool.query('SELECT name, total_sent::int FROM queues ORDER BY name');
    expect(rows).toEqual([
      { name: 'a', total_sent: 0 },
      { name: 'b', total_sent: 1 },
    ]);
  });

  it('never gives one visible message to two of 8 concurrent readers, and together they get all 2,000', async () => {
    const total = 2_000;
    const sent = new Set<string>();
    for (let i = 0; i < total; i += 500) {
      for (const id of await queue.sendBatch('work', Array.from({ length: 500 }, (_, j) => ({ n: i + j })))) sent.add(id);
    }
    const readers = Array.from({ length: 8 }, () => new PgQueue(extraPool(1)));
    // Each reader on its own connection: read 10, archive them, until the queue is empty for it.
    const received = await Promise.all(
      readers.map(async (reader) => {
        const got: QueueMessage<{ n: number }>[] = [];
        for (let empty = 0; empty < 3; ) {
          const batch = await reader.read<{ n: number }>('work', 60_000, 10);
          if (batch.length === 0) {
            empty += 1;
            continue;
          }
          empty = 0;
          got.push(...batch);
          expect(await reader.archiveMany('work', batch.map((m) => m.msgId))).toHaveLength(batch.length);
        }
        return got;
      }),
    );
    const all = received.flat();
    const ids = all.map((m) => m.msgId);
    expect(new Set(ids).size).toBe(ids.length); // no message twice
    expect(new Set(ids)).toEqual(sent); // and every message once
    expect(all.every((m) => m.readCt === 1)).toBe(true);
    expect(received.filter((got) => got.length > 0).length).toBeGreaterThan(1); // really concurrent
    expect(await count('SELECT count(*) AS n FROM queue_messages')).toBe(0);
    expect(await count('SELECT count(*) AS n FROM queue_archive')).toBe(total);
  });

  it('redelivers a message whose visibility timeout expired, with read_ct + 1', async () => {
    const id = await queue.send('q', { hello: 'world' });
    const [first] = await queue.read('q', 200, 1);
    expect(first).toMatchObject({ msgId: id, readCt: 1 });
    expect(await queue.read('q', 200, 1)).toEqual([]); // hidden meanwhile

    const again = (await until(async () => (await queue.read('q', 30_000, 1))[0], (m) => m !== undefined, 'the message again'))!;
    expect(again).toMatchObject({ msgId: id, readCt: 2, message: { hello: 'world' } });
    expect(again.vt.getTime()).toBeGreaterThan(first!.vt.getTime());
    expect(Date.now()).toBeGreaterThanOrEqual(first!.vt.getTime() - 50); // not before the timeout (clock slack)
  });

  it('keeps a delayed message invisible until its delay has passed', async () => {
    const [id] = await queue.sendBatch('q', ['later'], { delayMs: 300 });
    const { rows } = await db.pool.query<{ delay_ms: number }>(
      `SELECT extract(epoch FROM vt - enqueued_at) * 1000 AS delay_ms FROM queue_messages WHERE msg_id = $1`,
      [id],
    );
    expect(Number(rows[0]!.delay_ms)).toBeCloseTo(300, 3);
    expect(await queue.read('q', 1000, 10)).toEqual([]);
    expect(await queue.pop('q')).toBeUndefined();
    const got = (await until(async () => (await queue.read('q', 1000, 10))[0], (m) => m !== undefined, 'the message'))!;
    expect(got).toMatchObject({ msgId: id, readCt: 1, message: 'later' });
    expect(got.vt.getTime() - got.enqueuedAt.getTime()).toBeGreaterThanOrEqual(1000 + 300 - 5);
  });

  it('archive moves the row to queue_archive, once; a second archive returns false', async () => {
    const id = await queue.send('q', { job: 1 });
    await queue.read('q', 30_000, 1);
    expect(await queue.archive('q', id)).toBe(true);
    expect(await inQueue(id)).toBe(0);
    expect(await inArchive(id)).toBe(1);
    const { rows } = await db.pool.query('SELECT queue, read_ct, message, archived_at FROM queue_archive WHERE msg_id = $1', [id]);
    expect(rows[0]).toMatchObject({ queue: 'q', read_ct: 1, message: { job: 1 } });
    expect(rows[0].archived_at).toBeInstanceOf(Date);

    expect(await queue.archive('q', id)).toBe(false);
    expect(await inArchive(id)).toBe(1);
    expect(await queue.archive('q', '999999')).toBe(false);
  });

  it('two concurrent archives of one message: exactly one wins', async () => {
    const ids = await queue.sendBatch('q', Array.from({ length: 50 }, (_, i) => i));
    const other = new PgQueue(extraPool(1));
    const results = await Promise.all(ids.flatMap((id) => [queue.archive('q', id), other.archive('q', id)]));
    for (let i = 0; i < ids.length; i++) expect([results[2 * i], results[2 * i + 1]].sort()).toEqual([false, true]);
    expect(await count('SELECT count(*) AS n FROM queue_archive')).toBe(50);
  });

  it('archive and delete name the queue: another queue\'s message is not touched', async () => {
    const id = await queue.send('a', 1);
    expect(await queue.archive('b', id)).toBe(false);
    expect(await queue.delete('b', id)).toBe(false);
    expect(await queue.setVt('b', id, 0)).toBeUndefined();
    expect(await inQueue(id)).toBe(1);
  });

  it('archiveMany returns the ids actually archived', async () => {
    const ids = await queue.sendBatch('q', [1, 2, 3, 4]);
    expect(await queue.delete('q', ids[1]!)).toBe(true);
    expect(await queue.archiveMany('q', [ids[3]!, ids[1]!, ids[0]!, '123456789'])).toEqual([ids[0], ids[3]]);
    expect(await queue.archiveMany('q', [ids[0]!, ids[2]!])).toEqual([ids[2]]);
    expect(await queue.archiveMany('q', [])).toEqual([]);
    expect(await count('SELECT count(*) AS n FROM queue_archive')).toBe(3);
    expect(await count('SELECT count(*) AS n FROM queue_messages')).toBe(0);
  });

  it('delete removes for good; a second delete returns false', async () => {
    const id = await queue.send('q', 'x');
    expect(await queue.delete('q', id)).toBe(true);
    expect(await queue.delete('q', id)).toBe(false);
    expect(await inQueue(id)).toBe(0);
    expect(await inArchive(id)).toBe(0);
  });

  it('pop hands out the oldest visible message and deletes it', async () => {
    const [a, b] = await queue.sendBatch('q', ['a', 'b']);
    await queue.send('q', 'delayed', { delayMs: 60_000 });
    const popped = await queue.pop<string>('q');
    expect(popped).toMatchObject({ msgId: a, readCt: 1, message: 'a' });
    expect(await inQueue(a!)).toBe(0);
    expect(await inArchive(a!)).toBe(0);
    expect((await queue.pop('q'))?.msgId).toBe(b);
    expect(await queue.pop('q')).toBeUndefined();
    expect(await queue.pop('empty-or-unknown')).toBeUndefined();
  });

  it('purge deletes every message of the queue, in flight or not, and no other queue\'s', async () => {
    await queue.sendBatch('q', [1, 2, 3]);
    await queue.send('q', 4, { delayMs: 60_000 });
    await queue.read('q', 30_000, 1);
    await queue.send('other', 1);
    expect(await queue.purge('q')).toBe(4);
    expect(await queue.purge('q')).toBe(0);
    expect(await count(`SELECT count(*) AS n FROM queue_messages WHERE queue = 'other'`)).toBe(1);
  });

  it('setVt hides or reveals one message', async () => {
    const id = await queue.send('q', 'x');
    const hidden = await queue.setVt('q', id, 60_000);
    expect(hidden).toMatchObject({ msgId: id, readCt: 0, message: 'x' });
    expect(hidden!.vt.getTime() - Date.now()).toBeGreaterThan(50_000);
    expect(await queue.read('q', 1000, 1)).toEqual([]);

    const shown = await queue.setVt('q', id, 0);
    expect(shown!.vt.getTime()).toBeLessThanOrEqual(Date.now() + 50);
    expect((await queue.read('q', 1000, 1))[0]).toMatchObject({ msgId: id, readCt: 1 });

    await queue.delete('q', id);
    expect(await queue.setVt('q', id, 1000)).toBeUndefined();
  });

  it('setVtMany extends the messages still there (a batched heartbeat)', async () => {
    const ids = await queue.sendBatch('q', [1, 2, 3]);
    const read = await queue.read('q', 300, 3);
    expect(read).toHaveLength(3);
    await queue.archive('q', ids[2]!);
    expect(await queue.setVtMany('q', [ids[0]!, ids[1]!, ids[2]!], 60_000)).toBe(2);
    expect(await queue.setVtMany('q', [], 60_000)).toBe(0);
    await sleep(400); // past the original 300 ms timeout
    expect(await queue.read('q', 1000, 10)).toEqual([]);
    expect(await queue.setVtMany('q', [ids[1]!], 0)).toBe(1);
    expect((await queue.read('q', 1000, 10)).map((m) => [m.msgId, m.readCt])).toEqual([[ids[1], 2]]);
  });

  it('sendBatch in a caller transaction that rolls back leaves nothing, and notifies nobody', async () => {
    const rolledBack = wakeCounter();
    const sentinel = wakeCounter();
    const a = queue.listen('q', rolledBack.wake);
    const b = queue.listen('sentinel', sentinel.wake);
    cleanups.push(() => a.stop(), () => b.stop());
    await until(async () => rolledBack.calls > 0 && sentinel.calls > 0, Boolean, 'both listening');
    const before = rolledBack.calls;

    await inTransaction(async (client) => {
      const ids = await queue.sendBatch('q', [1, 2, 3], { db: client });
      expect(ids).toHaveLength(3);
      expect(await queue.read('q', 1000, 10)).toEqual([]); // not visible to others before commit
    }, 'ROLLBACK');
    // Notifications arrive in commit order on the one listening connection: once the sentinel's
    // has arrived, a notification of the rolled-back send would have too.
    const woken = sentinel.next();
    await queue.send('sentinel', 'tick');
    await woken;
    expect(rolledBack.calls).toBe(before);

    expect(await count('SELECT count(*) AS n FROM queue_messages')).toBe(1);
    expect(await count(`SELECT count(*) AS n FROM queues WHERE name = 'q'`)).toBe(0); // its creation rolled back too
    expect((await queue.metrics('q')).totalSent).toBe(0);
  });

  it('listen wakes on send at the sender\'s commit, not before; stop ends it', async () => {
    const woken = wakeCounter();
    const sentinel = wakeCounter();
    const sub = queue.listen('q', woken.wake);
    const other = queue.listen('sentinel', sentinel.wake);
    cleanups.push(() => sub.stop(), () => other.stop());
    await until(async () => woken.calls > 0 && sentinel.calls > 0, Boolean, 'the connect wake-up');
    const before = woken.calls;

    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await queue.send('q', 'x', { db: client });
      const tick = sentinel.next();
      await queue.send('sentinel', 'tick'); // committed after our send, delivered before our commit
      await tick;
      expect(woken.calls).toBe(before);
      const next = woken.next();
      await client.query('COMMIT');
      await next;
      expect(woken.calls).toBe(before + 1);
    } finally {
      client.release();
    }

    // A late subscriber gets a first wake-up of its own, then the sends.
    const late = wakeCounter();
    const lateFirst = late.next();
    const lateSub = queue.listen('q', late.wake);
    await lateFirst;
    const lateNext = late.next();
    await queue.sendBatch('q', [1, 2]); // one notification per send statement
    await lateNext;

    await sub.stop();
    await lateSub.stop();
    await sub.stop(); // idempotent
    const callsAfterStop = woken.calls;
    const tick = sentinel.next();
    await queue.send('q', 'y');
    await queue.send('sentinel', 'tick');
    await tick;
    expect(woken.calls).toBe(callsAfterStop);
  });

  it('listen closes its connection when the last subscriber stops', async () => {
    const appName = `jl-queue-listen-${process.pid}`;
    const own = new PgQueue(extraPool(2, { application_name: appName }));
    const listeners = () =>
      count(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1 AND query ILIKE 'LISTEN%'`, [appName]);
    const w = wakeCounter();
    const s1 = own.listen('a', w.wake);
    const s2 = own.listen('b', w.wake);
    await until(listeners, (n) => n === 1, 'one listener');
    await s1.stop();
    expect(await listeners()).toBe(1);
    await s2.stop();
    await until(listeners, (n) => n === 0, 'no listener');
  });

  it('sends NOTIFY on channel jobledger_queue with the queue name', async () => {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    cleanups.push(() => client.end());
    const payloads: string[] = [];
    client.on('notification', (n) => n.channel === QUEUE_CHANNEL && payloads.push(n.payload ?? ''));
    await client.query(`LISTEN ${QUEUE_CHANNEL}`);
    await queue.sendBatch('some.queue-name_1', [1, 2, 3]);
    await until(async () => payloads.length, (n) => n > 0, 'a payload');
    expect(payloads).toEqual(['some.queue-name_1']);
  });

  it('metrics: depth, visibleNow, oldestAgeMs, totalSent', async () => {
    expect(await queue.metrics('q')).toEqual({ queue: 'q', depth: 0, visibleNow: 0, oldestAgeMs: null, totalSent: 0 });
    const ids = await queue.sendBatch('q', [1, 2, 3]);
    await queue.send('q', 4, { delayMs: 60_000 });
    await queue.send('other', 1);
    await queue.read('q', 60_000, 1);
    await sleep(50);
    const m = await queue.metrics('q');
    expect(m).toMatchObject({ queue: 'q', depth: 4, visibleNow: 2, totalSent: 4 });
    expect(m.oldestAgeMs).toBeGreaterThanOrEqual(40);
    expect(m.oldestAgeMs).toBeLessThan(10_000);

    await queue.archive('q', ids[0]!);
    await queue.delete('q', ids[1]!);
    expect(await queue.metrics('q')).toMatchObject({ depth: 2, visibleNow: 1, totalSent: 4 });
    await queue.purge('q');
    expect(await queue.metrics('q')).toEqual({ queue: 'q', depth: 0, visibleNow: 0, oldestAgeMs: null, totalSent: 4 });
  });

  it('a send inside an open transaction does not block other senders to the queue; totalSent stays exact', async () => {
    await queue.send('q', 'first'); // the queue exists
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await queue.sendBatch('q', [1, 2], { db: holder }); // holds the queue row until it ends
      // Other senders, in their own transactions and outside any, must not wait for it.
      const others = Promise.all([
        queue.send('q', 'a'),
        queue.sendBatch('q', ['b', 'c', 'd']),
        inTransaction((client) => queue.sendBatch('q', ['e', 'f'], { db: client }), 'COMMIT'),
        inTransaction((client) => queue.sendBatch('q', ['g'], { db: client }), 'ROLLBACK'),
      ]);
      const outcome = await Promise.race([others.then(() => 'done'), sleep(5_000).then(() => 'blocked')]);
      expect(outcome).toBe('done');
      expect((await queue.metrics('q')).totalSent).toBe(1 + 1 + 3 + 2); // the holder's 2 not committed yet
      await holder.query('ROLLBACK');
    } finally {
      holder.release();
    }
    expect((await queue.metrics('q')).totalSent).toBe(7);
    await queue.send('q', 'after'); // folds the pending counts into the queue row
    expect((await queue.metrics('q')).totalSent).toBe(8);
    expect(await count(`SELECT total_sent AS n FROM queues WHERE name = 'q'`)).toBe(8);
    expect(await count('SELECT count(*) AS n FROM queue_send_counts')).toBe(0);
  });

  it('totalSent is exact under many concurrent senders, in and out of transactions, some rolling back', async () => {
    const pools = Array.from({ length: 6 }, () => extraPool(1));
    let committed = 0;
    await Promise.all(
      pools.map(async (pool, p) => {
        const q = new PgQueue(pool);
        for (let i = 0; i < 40; i++) {
          const n = 1 + ((i + p) % 4);
          const values = Array.from({ length: n }, (_, j) => j);
          if (i % 3 === 0) {
            await q.sendBatch('fresh', values); // the first ones race to create the queue
            committed += n;
            continue;
          }
          const client = await pool.connect();
          try {
            await client.query('BEGIN');
            await q.sendBatch('fresh', values, { db: client });
            await sleep(i % 2);
            const rollBack = i % 5 === 0;
            await client.query(rollBack ? 'ROLLBACK' : 'COMMIT');
            if (!rollBack) committed += n;
          } finally {
            client.release();
          }
        }
      }),
    );
    expect((await queue.metrics('fresh')).totalSent).toBe(committed);
    expect(await count(`SELECT count(*) AS n FROM queue_messages WHERE queue = 'fresh'`)).toBe(committed);
  });

  it('a sender above READ COMMITTED neither waits nor fails; its count is folded later', async () => {
    await queue.send('q', 0);
    await inTransaction(async (client) => {
      await client.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      await client.query('SELECT 1'); // takes the snapshot
      await queue.send('q', 3); // another sender updates the queue row after that snapshot
      // Locking that row now would fail with a serialization error; the send must not try.
      await queue.sendBatch('q', [1, 2], { db: client });
      await queue.send('q', 4, { db: client });
    }, 'COMMIT');
    expect((await queue.metrics('q')).totalSent).toBe(5);
    await queue.send('q', 5);
    expect(await count(`SELECT total_sent AS n FROM queues WHERE name = 'q'`)).toBe(6);
  });

  it('rejects a bad queue name with an error naming `queue`, writing nothing', async () => {
    // The domain's QueueName is the one rule, here as for a job's queue: not starting with "." or "-" either.
    const bad = ['', 'a'.repeat(64), 'has space', 'semi;colon', "quote'", 'ünïcode', 'slash/', '-flag', '.hidden'];
    for (const name of bad) {
      const attempts: (() => Promise<unknown>)[] = [
        () => queue.create(name),
        () => queue.send(name, 1),
        () => queue.sendBatch(name, [1, 2]),
        () => queue.read(name, 1000, 1),
        () => queue.setVt(name, '1', 1000),
        () => queue.setVtMany(name, ['1'], 1000),
        () => queue.archive(name, '1'),
        () => queue.archiveMany(name, ['1']),
        () => queue.delete(name, '1'),
        () => queue.pop(name),
        () => queue.purge(name),
        () => queue.metrics(name),
      ];
      for (const attempt of attempts) {
        const error = await attempt().then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(InvalidQueueNameError);
        expect((error as Error).message).toMatch(/`queue`/);
        expect((error as InvalidQueueNameError).queue).toBe(name);
      }
      expect(() => queue.listen(name, () => undefined)).toThrow(InvalidQueueNameError);
    }
    expect(await count('SELECT count(*) AS n FROM queues')).toBe(0);
    expect(await count('SELECT count(*) AS n FROM queue_messages')).toBe(0);
    // The longest and most varied valid name is fine, and the table refuses what the check refuses.
    await queue.send(`A-z_0.9${'x'.repeat(56)}`, 1);
    await expect(db.pool.query(`INSERT INTO queues (name) VALUES ('bad name')`)).rejects.toMatchObject({ code: '23514' });
    await expect(db.pool.query(`INSERT INTO queues (name) VALUES ('-flag')`)).rejects.toMatchObject({ code: '23514' });
  });

  it('rejects bad durations, quantities and ids before writing', async () => {
    await expect(queue.send('q', 1, { delayMs: -1 })).rejects.toThrow(/delayMs/);
    await expect(queue.send('q', 1, { delayMs: Number.NaN })).rejects.toThrow(/delayMs/);
    await expect(queue.read('q', -5, 1)).rejects.toThrow(/vtMs/);
    await expect(queue.read('q', 1000, 0)).rejects.toThrow(/qty/);
    await expect(queue.read('q', 1000, 1.5)).rejects.toThrow(/qty/);
    await expect(queue.archive('q', 'abc')).rejects.toThrow(/msgId/);
    await expect(queue.setVtMany('q', ['1', '2; DROP'], 10)).rejects.toThrow(/msgId/);
    expect(await count('SELECT count(*) AS n FROM queues')).toBe(0);
  });
});

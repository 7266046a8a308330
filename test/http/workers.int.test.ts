import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOP_KEYS } from '../../src/adapters/postgres/queries/ledger-metrics.js';
import type { Worker } from '../../src/adapters/worker/worker.js';
import { until } from '../support/until.js';
import { startTestServer, type TestServer } from './support.js';

// GET /api/workers, GET /api/queues, the overview's holder states and warnings (GET /api/keys),
// and the bounded figures of /metrics (issue 12, parts 1 and 10).

let s: TestServer;
let worker: Worker;
/** Jobs of `run` wait here until released. */
const waiting = new Map<string, () => void>();

beforeAll(async () => {
  s = await startTestServer();
  worker = s.ledger.worker({ queue: 'served', concurrency: 4, presenceIntervalMs: 1_000, handlers: { run: (_args, ctx) => new Promise<void>((resolve) => void waiting.set(ctx.jobId, resolve)) } });
  worker.start();
  await s.ledger.enqueueMany([
    // Run by the live worker.
    { name: 'run', key: 'w/running', limit: 1, queue: 'served', jobId: 'wr-1' },
    // On a queue nobody reads: admitted, never started.
    { name: 'run', key: 'w/unread', limit: 1, queue: 'unread', jobId: 'wu-1' },
    { name: 'run', key: 'w/unread', queue: 'unread', jobId: 'wu-2' },
  ]);
  // Started by a worker that never announced itself (as a worker of an older release, or one killed before its first beat).
  await s.ledger.enqueue({ name: 'run', key: 'w/ghost', limit: 1, queue: 'ghosts', jobId: 'wg-1' });
  await s.start('w/ghost', 'wg-1', 'ghost-worker');
  await until(async () => waiting.has('wr-1'), Boolean, 'the served job to start');
});

afterAll(async () => {
  for (const release of waiting.values()) release();
  await s.close();
});

describe('GET /api/workers', () => {
  it('lists the live worker with its queue, concurrency, running jobs and slots held', async () => {
    const { status, body } = await until(
      () => s.get('/api/workers'),
      (r) => r.body.workers?.[0]?.running === 1,
      'a beat with the running job',
    );
    expect(status).toBe(200);
    expect(body).toMatchObject({ now: expect.any(Number), live: 1, gone: 0 });
    expect(body.workers).toEqual([
      {
        id: worker.workerId,
        host: expect.any(String),
        pid: process.pid,
        queue: 'served',
        concurrency: 4,
        heartbeatMs: 1_000,
        startedAt: expect.any(Number),
        lastSeen: expect.any(Number),
        seenAgoMs: expect.any(Number),
        running: 1,
        stoppedAt: null,
        state: 'live',
        holding: 1,
        runningJobs: [{ jobId: 'wr-1', key: 'w/running' }],
        runningJobCount: 1,
      },
    ]);
  });


  it('refuses a query field it does not know (400 naming it)', async () => {
    await s.refused(() => s.get('/api/workers', { state: 'live' }), 400, 'state');
    await s.refused(() => s.get('/api/queues', { queue: 'x' }), 400, 'queue');
  });
});

describe('GET /api/queues', () => {
  it('per queue: depth, visible now, oldest message age, consumers and their capacity', async () => {
    const { status, body } = await s.get('/api/queues');
    expect(status).toBe(200);
    const byName = Object.fromEntries(body.queues.map((q: { queue: string }) => [q.queue, q]));
    expect(byName.unread).toEqual({ queue: 'unread', depth: 1, visibleNow: 1, oldestAgeMs: expect.any(Number), oldestAt: expect.any(Number), consumers: 0, capacity: 0 });
    // wr-1's message is in flight (read, started); the live worker consumes the queue.
    expect(byName.served).toMatchObject({ queue: 'served', consumers: 1, capacity: 4 });
  });
});

describe('GET /api/keys: holder states and warnings', () => {
  it('counts holders by state per key and in the totals, never calling a holder nobody runs live', async () => {
    const { body } = await s.get('/api/keys');
    const row = (key: string) => body.keys.find((k: { key: string }) => k.key === key);
    expect(row('w/running')).toMatchObject({ leaseState: 'live', holderStates: { running: 1, unstarted: 0, expired: 0, workerGone: 0 } });
    expect(row('w/unread')).toMatchObject({ leaseState: 'unstarted', holderStates: { running: 0, unstarted: 1, expired: 0, workerGone: 0 }, oldestUnstartedAt: expect.any(Number) });
    expect(row('w/ghost')).toMatchObject({ leaseState: 'worker-gone', holderStates: { running: 0, unstarted: 0, expired: 0, workerGone: 1 } });
    expect(body.totals).toMatchObject({ slotsHeld: 3, holders: { running: 1, unstarted: 1, expired: 0, workerGone: 1 }, workers: { live: 1, gone: 0 } });
  });

  it('warns of queues with messages and no live consumer (first: they explain the unstarted holders) and of a holder whose worker is gone: one warning per cause', async () => {
    const { body } = await s.get('/api/keys');
    expect(body.warnings).toEqual([
      // wg-1's message was never read: its starter took it from the ledger, not from the queue.
      {
        kind: 'queue-without-consumer',
        count: 2,
        queues: [
          { queue: 'ghosts', depth: 1, oldestAt: null },
          { queue: 'unread', depth: 1, oldestAt: expect.any(Number) },
        ],
        message: '2 queues with messages and no live worker reading them: ghosts (1), unread (1)',
      },
      { kind: 'holders-worker-gone', count: 1, holders: 1, keys: [{ key: 'w/ghost', count: 1 }], message: expect.stringContaining('whose worker is gone') },
    ]);
  });

  it('the key detail says which worker runs a holder and when it renewed', async () => {
    const { body } = await s.get('/api/keys/detail', { key: 'w/running' });
    expect(body.holders).toEqual([
      expect.objectContaining({ jobId: 'wr-1', state: 'running', leaseState: 'live', workerId: worker.workerId, renewedAt: expect.any(Number), workerLastSeen: expect.any(Number) }),
    ]);
  });
});

/** Every series of metric `name`: its labels (as one string) -> value. */
const series = (text: string, name: string): Map<string, number> =>
  new Map([...text.matchAll(new RegExp(`^${name}(?:\\{([^}]*)\\})? (\\S+)$`, 'gm'))].map((m) => [m[1] ?? '', Number(m[2])]));

describe('GET /metrics stays bounded', () => {
  it('per queue consumers, workers and holders by state, the ledger size, and only the top keys by parked jobs and by wait', async () => {
    // More keys with parked jobs than the rankings name: key n has n + 1 parked jobs.
    const keys = Array.from({ length: TOP_KEYS + 3 }, (_, n) => `w/top-${String(n).padStart(2, '0')}`);
    await s.ledger.enqueueMany(keys.flatMap((key, n) => Array.from({ length: n + 3 }, (_, i) => ({ name: 'run', key, limit: 1, queue: 'unread', jobId: `${key}-${i}` }))));
    const text = await (await fetch(`${s.url}/metrics`)).text();

    const consumers = series(text, 'jobledger_queue_consumers');
    expect([consumers.get('queue="served"'), consumers.get('queue="unread"'), consumers.get('queue="ghosts"')]).toEqual([1, 0, 0]);
    expect(series(text, 'jobledger_workers')).toEqual(new Map([['state="live"', 1], ['state="gone"', 0]]));
    expect(series(text, 'jobledger_holders')).toEqual(
      new Map([
        ['state="running"', 1],
        ['state="unstarted"', 1 + keys.length],
        ['state="expired"', 0],
        ['state="worker-gone"', 1],
      ]),
    );
    const parked = series(text, 'jobledger_top_key_parked_jobs');
    expect(parked.size).toBe(TOP_KEYS);
    // The most parked first: the last keys, each with n + 2 parked.
    expect([...parked.entries()].slice(0, 2)).toEqual([
      [`key="${keys.at(-1)}"`, keys.length + 1],
      [`key="${keys.at(-2)}"`, keys.length],
    ]);
    expect(series(text, 'jobledger_top_key_oldest_parked_age_seconds').size).toBe(TOP_KEYS);
    // No other series names a key: two rankings of TOP_KEYS each, whatever the number of keys.
    expect(text.split('\n').filter((line) => line.includes('key="'))).toHaveLength(2 * TOP_KEYS);
    expect(series(text, 'jobledger_ledger_events').get('table="events"')).toBeGreaterThan(0);
    expect(series(text, 'jobledger_ledger_events').get('table="events_archive"')).toBe(0);
    expect(series(text, 'jobledger_ledger_bytes').get('table="events"')).toBeGreaterThan(8192);
    expect(series(text, 'jobledger_ledger_bytes').get('table="events_archive"')).toBeGreaterThan(0);
  });
});

describe('GET /api/workers: which jobs each worker runs', () => {
  it('names the first 5 jobs a worker runs, newest first, and counts them all (issue 25: the table showed counts, not which jobs)', async () => {
    const own = await startTestServer();
    await own.db.pool.query(
      `INSERT INTO workers (id, host, pid, queue, concurrency, heartbeat_ms, started_at, last_seen, running) VALUES ('busy', 'h', 1, 'busy', 8, 3600000, now(), now(), 7)`,
    );
    const ids = Array.from({ length: 7 }, (_, i) => `busy-${i}`);
    for (const jobId of ids) {
      await own.ledger.enqueue({ name: 'run', key: `busy/${jobId}`, limit: 1, queue: 'busy', jobId });
      await own.start(`busy/${jobId}`, jobId, 'busy');
    }
    const busy = (await own.get('/api/workers')).body.workers.find((w: { id: string }) => w.id === 'busy');
    await own.close();
    expect(busy).toMatchObject({ state: 'live', runningJobCount: 7, runningJobs: ids.slice(2).reverse().map((jobId) => ({ jobId, key: `busy/${jobId}` })) });
  });
});

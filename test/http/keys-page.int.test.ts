import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './support.js';

// GET /api/keys a page at a time: sorted, filtered and counted by the database, the totals over
// every key, the warnings one per cause. The ledger's clock is the test's: admissions are made at
// chosen times, and "unstarted for longer than 30 s" comes by moving it on, with nothing written.

const BASE = Date.UTC(2026, 11, 1, 9);
let now = BASE;
let s: TestServer;

const MANY = Array.from({ length: 7 }, (_, i) => `many/${i}`);

beforeAll(async () => {
  s = await startTestServer({ clock: () => now });
  const q = { name: 'work', queue: 'q' } as const;
  // Admitted first: the many/* holders are the oldest unstarted ones.
  await s.ledger.enqueueMany(MANY.map((key) => ({ ...q, key, limit: 2 })));
  now = BASE + 1_000;
  await s.ledger.enqueueMany([
    { ...q, key: 'full/a', limit: 1 },
    { ...q, key: 'full/a' },
    { ...q, key: 'Mixed/Case', limit: 5 },
    { ...q, key: 'Mixed/Case' },
    { ...q, key: 'roomy', limit: 3 },
    { ...q, key: 'idle', limit: 2, delayMs: 3_600_000 },
    { ...q, key: 'att/gone', limit: 1, jobId: 'gone-1', leaseMs: 60_000 },
  ]);
  now = BASE + 2_000;
  await s.ledger.enqueueMany([1, 2, 3, 4].map((n) => ({ ...q, key: 'full/b', ...(n === 1 ? { limit: 2 } : {}) })));
  // Started by a worker that never announced itself: its holder is worker-gone.
  await s.start('att/gone', 'gone-1', 'ghost');
}, 120_000);

afterAll(async () => {
  await s?.close();
});

const keysOf = (body: { keys: { key: string }[] }) => body.keys.map((k) => k.key);
const page = async (query: Record<string, string> = {}) => {
  const { status, body } = await s.get('/api/keys', query);
  expect(status, JSON.stringify(body)).toBe(200);
  return body;
};

describe('the order', () => {
  it('by default: keys needing attention, then keys at their limit, then the rest; within each the most in use, then the most parked, then by key', async () => {
    const body = await page();
    expect(keysOf(body)).toEqual(['att/gone', 'full/b', 'full/a', 'Mixed/Case', ...MANY, 'roomy', 'idle']);
    expect(body.page).toEqual({ sort: 'attention', dir: 'asc', limit: 50, offset: 0, matched: 13 });
    expect(body.keys[0]).toMatchObject({ key: 'att/gone', leaseState: 'worker-gone', atLimit: true, attention: ['holders-worker-gone'] });
    expect(body.keys[1]).toMatchObject({ key: 'full/b', inUse: 2, parked: 2, atLimit: true, attention: [] });
  });

  it('by key, bytewise, either way; by parked, most first, or fewest; by the oldest wait (no wait last); by the worst holder', async () => {
    const byKey = ['Mixed/Case', 'att/gone', 'full/a', 'full/b', 'idle', ...MANY, 'roomy'];
    expect(keysOf(await page({ sort: 'key' }))).toEqual(byKey);
    expect(keysOf(await page({ sort: 'key', dir: 'desc' }))).toEqual([...byKey].reverse());
    const noneParked = byKey.filter((k) => !k.startsWith('full/'));
    expect(keysOf(await page({ sort: 'parked' }))).toEqual(['full/b', 'full/a', ...noneParked]);
    expect(keysOf(await page({ sort: 'parked', dir: 'asc' }))).toEqual([...noneParked, 'full/a', 'full/b']);
    expect(keysOf(await page({ sort: 'oldestWait' }))).toEqual(['full/a', 'full/b', ...noneParked]);
    expect(keysOf(await page({ sort: 'oldestWait', dir: 'desc' }))).toEqual(['full/b', 'full/a', ...noneParked]);
    expect(keysOf(await page({ sort: 'lease' }))).toEqual(['att/gone', 'Mixed/Case', 'full/a', 'full/b', ...MANY, 'roomy', 'idle']);
    expect(keysOf(await page({ sort: 'inUse' }))).toEqual(['att/gone', 'full/a', 'full/b', ...MANY, 'Mixed/Case', 'roomy', 'idle']);
    expect(keysOf(await page({ sort: 'scheduled' }))[0]).toBe('idle');
  });
});

describe('pages', () => {
  it('offset and limit walk the order without a gap or a repeat; the totals stay those of every key', async () => {
    const all = keysOf(await page({ sort: 'key' }));
    const walked: string[] = [];
    for (let offset = 0; offset < all.length; offset += 4) {
      const body = await page({ sort: 'key', limit: '4', offset: String(offset) });
      expect(body.page).toMatchObject({ limit: 4, offset, matched: 13 });
      expect(body.totals).toMatchObject({ keys: 13, keysAtLimit: 3, slotsHeld: 14, parked: 3, scheduled: 1 });
      walked.push(...keysOf(body));
    }
    expect(walked).toEqual(all);
    expect(await page({ offset: '100' })).toMatchObject({ keys: [], page: { matched: 13 }, totals: { keys: 13 } });
  });
});

describe('filters', () => {
  it('match: keys containing the text, whatever its case; atLimit and attention either way; together', async () => {
    expect(keysOf(await page({ match: 'mixed' }))).toEqual(['Mixed/Case']);
    expect(keysOf(await page({ match: 'FULL/' }))).toEqual(['full/b', 'full/a']);
    expect(keysOf(await page({ atLimit: 'true' }))).toEqual(['att/gone', 'full/b', 'full/a']);
    expect((await page({ atLimit: 'false' })).page.matched).toBe(10);
    expect(keysOf(await page({ attention: 'true' }))).toEqual(['att/gone']);
    const none = await page({ match: 'full', atLimit: 'false' });
    expect(none).toMatchObject({ keys: [], page: { matched: 0 }, totals: { keys: 13 } });
  });
});

describe('bad parameters', () => {
  it.each([
    [{ limit: '0' }, 'limit'],
    [{ limit: '201' }, 'limit'],
    [{ limit: '1.5' }, 'limit'],
    [{ limit: 'ten' }, 'limit'],
    [{ offset: '-1' }, 'offset'],
    [{ sort: 'name' }, 'sort'],
    [{ dir: 'up' }, 'dir'],
    [{ match: '' }, 'match'],
    [{ match: 'a\u0000b' }, 'match'],
    [{ atLimit: 'yes' }, 'atLimit'],
    [{ attention: '1' }, 'attention'],
    [{ page: '2' }, 'page'],
  ])('%j: 400 naming %s, nothing written', async (query, field) => {
    await s.refused(() => s.get('/api/keys', query), 400, field);
  });

  it('a parameter given twice: 400 naming it', async () => {
    const before = await s.eventCount();
    const response = await fetch(`${s.url}/api/keys?limit=1&limit=2`);
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ field: 'limit' });
    expect(await s.eventCount()).toBe(before);
  });
});

describe('needs attention, one warning per cause', () => {
  it('holders unstarted past 30 s: with nothing written, the clock alone makes them a cause; the queue nobody reads first, named as their reason', async () => {
    expect((await page()).warnings.map((w: { kind: string }) => w.kind)).toEqual(['queue-without-consumer', 'holders-worker-gone']);
    now = BASE + 33_000;
    const body = await page();
    expect(body.warnings).toEqual([
      { kind: 'queue-without-consumer', count: 1, queues: [{ queue: 'q', depth: 14, oldestAt: BASE }], message: 'queue q: 14 messages and no live worker reading it' },
      {
        kind: 'holders-unstarted',
        count: 11,
        holders: 13,
        since: BASE,
        // The longest waiting first.
        keys: MANY.slice(0, 5).map((key) => ({ key, count: 1, since: BASE })),
        unreadQueues: ['q'],
        message: '11 keys with holders admitted and not started for over 30 s (13 holders): many/0, many/1, many/2, many/3, many/4, and 6 more; they wait on queue q, which no live worker reads',
      },
      {
        kind: 'holders-worker-gone',
        count: 1,
        holders: 1,
        keys: [{ key: 'att/gone', count: 1 }],
        message: 'att/gone: 1 holder whose worker is gone: nobody runs it until the sweeper reclaims the lease at its expiry',
      },
    ]);
    // Every key with a holder needs attention now: the most in use first, then the most parked.
    expect(keysOf(body)).toEqual(['full/b', 'Mixed/Case', 'full/a', 'att/gone', ...MANY, 'roomy', 'idle']);
    expect(body.keys.find((k: { key: string }) => k.key === 'full/a').attention).toEqual(['holders-unstarted']);
    expect((await page({ attention: 'false' })).keys.map((k: { key: string }) => k.key)).toEqual(['idle']);
  });

  it('a lease run out (started at +2 s for 60 s): the clock alone makes it a cause of its own', async () => {
    now = BASE + 62_000;
    const expired = (await page()).warnings.find((w: { kind: string }) => w.kind === 'holders-expired');
    expect(expired).toEqual({ kind: 'holders-expired', count: 1, holders: 1, keys: [{ key: 'att/gone', count: 1 }], message: 'att/gone: 1 holder whose lease ran out, not reclaimed by the sweeper yet' });
  });
});

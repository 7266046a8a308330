import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './support.js';

// The page's poll of GET /api/keys on a ledger of 10,000 keys (20,000 jobs on one queue that no
// worker reads, as measured in issue 23: 2,980,503 bytes, every key a row, a warning per key).
// Its size is bounded by the page, not the keys: a fact of the answer, not a timing.

const KEYS = 10_000;
const MAX_POLL_BYTES = 50 * 1024;

let now = Date.UTC(2026, 11, 1, 9);
let s: TestServer;

beforeAll(async () => {
  s = await startTestServer({ clock: () => now });
  for (let from = 0; from < KEYS; from += 1_000) {
    await s.ledger.enqueueMany(
      Array.from({ length: 1_000 }, (_, i) => `tenant-${String(from + i).padStart(5, '0')}`).flatMap((key) => [
        { name: 'work', key, limit: 1, queue: 'nobody' },
        { name: 'work', key, queue: 'nobody' },
      ]),
    );
  }
  // Every holder unstarted for longer than the warning's threshold.
  now += 60_000;
}, 600_000);

afterAll(async () => {
  await s?.close();
});

describe(`GET /api/keys over ${KEYS} keys`, () => {
  it(`is at most ${MAX_POLL_BYTES} bytes: a page of 50, the totals of every key, two warnings (the queue nobody reads, and the ${KEYS} keys whose holders it leaves unstarted)`, async () => {
    const response = await fetch(`${s.url}/api/keys`);
    const text = await response.text();
    expect(response.status).toBe(200);
    expect(Buffer.byteLength(text)).toBeLessThanOrEqual(MAX_POLL_BYTES);
    const body = JSON.parse(text);
    expect(body.keys).toHaveLength(50);
    expect(body.page).toMatchObject({ matched: KEYS, limit: 50 });
    expect(body.totals).toMatchObject({ keys: KEYS, keysAtLimit: KEYS, slotsHeld: KEYS, parked: KEYS, holders: { unstarted: KEYS } });
    expect(body.warnings.map((w: { kind: string; count: number }) => [w.kind, w.count])).toEqual([
      ['queue-without-consumer', 1],
      ['holders-unstarted', KEYS],
    ]);
    expect(body.warnings[1].keys).toHaveLength(5);
    expect(body.warnings[1].unreadQueues).toEqual(['nobody']);
  });

  it('a poll that changes nothing is a 304 with no body', async () => {
    let tag = (await fetch(`${s.url}/api/keys`)).headers.get('etag')!;
    // See polls.int.test.ts: the tag settles once no older transaction of another database runs.
    for (let tries = 0; tries < 20; tries++) {
      const again = (await fetch(`${s.url}/api/keys`)).headers.get('etag')!;
      if (again === tag) break;
      tag = again;
    }
    const conditional = await fetch(`${s.url}/api/keys`, { headers: { 'if-none-match': tag } });
    expect(conditional.status).toBe(304);
    expect(await conditional.text()).toBe('');
  });
});

import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { TOKEN, startTestServer, type TestServer } from './support.js';

// serve answers each read the page polls (a page of keys, a key, here) again, without a read,
// while its answer is younger than answersFreshMs (1 s in serve): a moving ledger then costs a
// read a second however many pages poll. Another process's write is seen once the answer ages
// out; a write through this server at once.

let s: TestServer;

beforeAll(async () => {
  // A window no test outlives: what is asserted is what answers inside it.
  s = await startTestServer({ answersFreshMs: 60_000 });
  await s.ledger.enqueue({ name: 'work', key: 'f', limit: 1, jobId: 'f-1' });
});

afterAll(async () => {
  await s?.close();
});

const get = async (path: string, query: Record<string, string> = {}) => {
  const response = await fetch(`${s.url}${path}?${new URLSearchParams(query)}`);
  return { etag: response.headers.get('etag'), body: (await response.json()) as { totals?: { parked: number }; counts?: { parked: number }; paused?: unknown } };
};

describe('fresh answers (answersFreshMs)', () => {
  it("another process's write is not read while the answer is fresh: the same answer under the same tag, and nothing asked of the database", async () => {
    const keys = await get('/api/keys');
    const detail = await get('/api/keys/detail', { key: 'f' });
    // Another process (not this server) parks a job behind f-1.
    await s.ledger.enqueue({ name: 'work', key: 'f', jobId: 'f-2' });
    const version = vi.spyOn(s.ledger, 'version');
    const keysAgain = await get('/api/keys');
    const detailAgain = await get('/api/keys/detail', { key: 'f' });
    expect(version).not.toHaveBeenCalled();
    version.mockRestore();
    expect([keysAgain.etag, keysAgain.body.totals]).toEqual([keys.etag, keys.body.totals]);
    expect([detailAgain.etag, detailAgain.body.counts]).toEqual([detail.etag, detail.body.counts]);
    expect(keysAgain.body.totals?.parked).toBe(0);
    // A poll that holds the tag is a 304.
    expect((await fetch(`${s.url}/api/keys`, { headers: { 'if-none-match': keys.etag! } })).status).toBe(304);
    // Another page (another question) is read.
    expect((await get('/api/keys', { limit: '10' })).body.totals?.parked).toBe(1);
  });

  it('a write through this server is seen by the next poll', async () => {
    const before = await get('/api/keys/detail', { key: 'f' });
    expect(before.body.paused).toBeNull();
    const paused = await fetch(`${s.url}/api/keys/pause`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, body: JSON.stringify({ key: 'f', by: 'ops' }) });
    expect(paused.status).toBe(200);
    const after = await get('/api/keys/detail', { key: 'f' });
    expect(after.body.paused).toMatchObject({ by: 'ops' });
    expect(after.etag).not.toBe(before.etag);
    // And what the earlier test's other process wrote, now read.
    expect((await get('/api/keys')).body.totals?.parked).toBe(1);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, startTestServer, type TestServer } from './support.js';

// Named tokens (JOBLEDGER_TOKENS): each action is recorded under the name of the operator whose
// token the request carried (issue 12: the audit said "revoked by http 127.0.0.1"); the shared
// token keeps recording the body's `by`, else the client's address.

let s: TestServer;
const KEY = 'named/ключ';
const ALICE = 'alice-token-\u00e9';
const BOB = 'bob-token';

beforeAll(async () => {
  s = await startTestServer({ tokens: [{ name: 'alice', token: ALICE }, { name: 'bob', token: BOB }] });
  await s.ledger.enqueueMany([1, 2, 3].map((n) => ({ name: 'a', key: KEY, limit: 1, jobId: `nt-${n}` })));
});

afterAll(async () => {
  await s.close();
});

const handoffOf = async (jobId: string) => (await s.get('/api/audit', { key: KEY })).body.handoffs.find((h: { jobId: string }) => h.jobId === jobId);

describe('named tokens', () => {
  it('whoami says whose token a request carries: the name, null for the shared token, 401 without one', async () => {
    expect(await s.post('/api/whoami', {}, ALICE)).toMatchObject({ status: 200, body: { name: 'alice' } });
    expect(await s.post('/api/whoami', {}, BOB)).toMatchObject({ status: 200, body: { name: 'bob' } });
    expect(await s.post('/api/whoami', {}, TOKEN)).toMatchObject({ status: 200, body: { name: null } });
    expect((await s.post('/api/whoami', {}, 'not-a-token')).status).toBe(401);
  });

  it("records a named token's action under the operator's name in the audit, whatever the client's address", async () => {
    await s.start(KEY, 'nt-1', 'w-1');
    expect((await s.post('/api/keys/release', { key: KEY, jobId: 'nt-1' }, ALICE)).status).toBe(200);
    await s.stopped(KEY, 'nt-1');
    expect(await handoffOf('nt-1')).toMatchObject({ jobId: 'nt-1', reason: 'revoked', by: 'alice' });
  });

  it('accepts a by that is the operator\'s own name', async () => {
    expect((await s.post('/api/keys/pause', { key: KEY, by: 'bob', reason: 'vendor outage' }, BOB)).status).toBe(200);
    expect((await s.get('/api/keys/detail', { key: KEY })).body.paused).toMatchObject({ by: 'bob', reason: 'vendor outage' });
    expect((await s.post('/api/keys/resume', { key: KEY }, BOB)).status).toBe(200);
  });

  it('refuses (400, naming by) a by that names someone else, and writes nothing', async () => {
    const body = await s.refused(() => s.post('/api/keys/release', { key: KEY, jobId: 'nt-2', by: 'bob' }, ALICE), 400, 'by');
    expect(body.error).toContain("the token is alice's");
    await s.refused(() => s.post('/api/keys/limit', { key: KEY, limit: 2, by: 'mallory' }, BOB), 400, 'by');
  });

  it('the shared token still works, recorded under the body\'s by, else the client address', async () => {
    await s.start(KEY, 'nt-2', 'w-1');
    expect((await s.post('/api/keys/release', { key: KEY, jobId: 'nt-2', by: 'erin' }, TOKEN)).status).toBe(200);
    await s.stopped(KEY, 'nt-2');
    expect(await handoffOf('nt-2')).toMatchObject({ reason: 'revoked', by: 'erin' });
    await s.start(KEY, 'nt-3', 'w-1');
    expect((await s.post('/api/keys/release', { key: KEY, jobId: 'nt-3' }, TOKEN)).status).toBe(200);
    await s.stopped(KEY, 'nt-3');
    expect(await handoffOf('nt-3')).toMatchObject({ reason: 'revoked', by: 'http 127.0.0.1' });
  });

  it('a wrong token is still a 401 that writes nothing', async () => {
    await s.refused(() => s.post('/api/keys/limit', { key: KEY, limit: 3 }, 'alice'), 401);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_ARGS_BYTES } from '../../src/domain/values.js';
import { TOKEN, startTestServer, type TestServer } from './support.js';

// GET /api/jobs, POST /api/jobs (enqueue), POST /api/jobs/cancel, and the server's own limits.

let s: TestServer;

beforeAll(async () => {
  s = await startTestServer();
});

afterAll(async () => {
  await s.close();
});

describe('POST /api/jobs', () => {
  it('enqueues: 201 with the job id and acquired / parked / scheduled; the same job id again records nothing', async () => {
    const first = await s.post('/api/jobs', { name: 'send', key: 'mail/ü ber', limit: 1, args: { to: 'a@example.com' }, jobId: 'j-1' });
    expect(first).toEqual({ status: 201, body: { jobId: 'j-1', status: 'acquired' } });
    expect((await s.post('/api/jobs', { name: 'send', key: 'mail/ü ber', jobId: 'j-2' })).body).toEqual({ jobId: 'j-2', status: 'parked' });
    expect((await s.post('/api/jobs', { name: 'send', key: 'mail/ü ber', delayMs: 3_600_000, jobId: 'j-3' })).body).toEqual({ jobId: 'j-3', status: 'scheduled' });
    const before = await s.eventCount();
    expect(await s.post('/api/jobs', { name: 'send', key: 'mail/ü ber', jobId: 'j-1' })).toEqual({ status: 200, body: { jobId: 'j-1', status: 'duplicate' } });
    expect(await s.eventCount()).toBe(before);
    const unkeyed = await s.post('/api/jobs', { name: 'ping' });
    expect(unkeyed.status).toBe(201);
    expect(unkeyed.body).toMatchObject({ jobId: expect.any(String), status: 'acquired' });
  });

  it('needs the token', async () => {
    await s.refused(() => s.post('/api/jobs', { name: 'send' }, null), 401);
    await s.refused(() => s.post('/api/jobs', { name: 'send' }, 'nope'), 401);
  });

  it.each([
    [{}, 'name'],
    [{ name: '' }, 'name'],
    [{ name: 'send', key: 'k', limit: 0 }, 'limit'],
    [{ name: 'send', key: 'k', limit: 'two' }, 'limit'],
    [{ name: 'send', key: '' }, 'key'],
    [{ name: 'send', leaseMs: 10 }, 'leaseMs'],
    [{ name: 'send', priority: 1.5 }, 'priority'],
    [{ name: 'send', runAt: 'tomorrow' }, 'runAt'],
    [{ name: 'send', queue: 'no spaces' }, 'queue'],
    [{ name: 'send', maxAttempts: 0 }, 'maxAttempts'],
    [{ name: 'send', limit: 2 }, 'limit'],
    [{ name: 'send', delay: 5 }, 'delay'],
    [null, '(body)'],
  ])('bad body %j: 400 naming %s, nothing written', async (body, field) => {
    await s.refused(() => s.post('/api/jobs', body), 400, field);
  });
});

describe('GET /api/jobs', () => {
  beforeAll(async () => {
    await s.ledger.enqueueMany(Array.from({ length: 7 }, (_, i) => ({ name: 'page', key: 'paging/key', limit: 2, jobId: `p-${i}` })));
  });

  it('filters by key and status; pages with the cursor, newest first, each job once', async () => {
    const parked = (await s.get('/api/jobs', { key: 'paging/key', status: 'parked' })).body;
    expect(parked.jobs.map((j: { jobId: string }) => j.jobId).sort()).toEqual(['p-2', 'p-3', 'p-4', 'p-5', 'p-6']);
    expect(parked.jobs.every((j: { key: string; status: string }) => j.key === 'paging/key' && j.status === 'parked')).toBe(true);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { status: number; body: { jobs: { jobId: string }[]; nextCursor: string | null } } = await s.get('/api/jobs', { key: 'paging/key', limit: '3', ...(cursor ? { cursor } : {}) });
      expect(page.status).toBe(200);
      expect(page.body.jobs.length).toBeLessThanOrEqual(3);
      seen.push(...page.body.jobs.map((j) => j.jobId));
      cursor = page.body.nextCursor;
    } while (cursor !== null);
    expect(seen.sort()).toEqual(['p-0', 'p-1', 'p-2', 'p-3', 'p-4', 'p-5', 'p-6']);
  });

  it.each([
    [{ limit: 'many' }, 'limit'],
    [{ limit: '0' }, 'limit'],
    [{ status: 'sleeping' }, 'status'],
    [{ key: '' }, 'key'],
    [{ cursor: 'not-a-cursor' }, 'cursor'],
    [{ sort: 'asc' }, 'sort'],
  ])('bad query %j: 400 naming %s', async (query, field) => {
    await s.refused(() => s.get('/api/jobs', query), 400, field);
  });

  const cursorOf = (position: unknown) => Buffer.from(JSON.stringify(position)).toString('base64url');

  it.each([
    ['[1e300,"x"]', [1e300, 'x']],
    ['a time before PostgreSQL\'s first', [-1e15, 'x']],
    ['a fraction of a ms', [1.5, 'x']],
  ])('regression (issue 21: a crafted cursor was a 500 from to_timestamp): %s is a 400 naming cursor', async (_what, position) => {
    await s.refused(() => s.get('/api/jobs', { cursor: cursorOf(position) }), 400, 'cursor');
  });

  it("regression (issue 21): a cursor the server made, with a character base64url skips added, is not the server's: 400", async () => {
    const { nextCursor } = (await s.get('/api/jobs', { limit: '1' })).body as { nextCursor: string };
    expect((await s.get('/api/jobs', { limit: '1', cursor: nextCursor })).status).toBe(200);
    await s.refused(() => s.get('/api/jobs', { limit: '1', cursor: `${nextCursor}!` }), 400, 'cursor');
  });
});

describe('POST /api/jobs/cancel', () => {
  it('cancels a parked job; 404 for an unknown job; 400 naming jobId; 401 without the token', async () => {
    await s.ledger.enqueueMany([
      { name: 'c', key: 'cancel me', limit: 1, jobId: 'c-1' },
      { name: 'c', key: 'cancel me', jobId: 'c-2' },
    ]);
    await s.refused(() => s.post('/api/jobs/cancel', { jobId: 'c-2' }, null), 401);
    await s.refused(() => s.post('/api/jobs/cancel', {}), 400, 'jobId');
    await s.refused(() => s.post('/api/jobs/cancel', { jobId: 5 }), 400, 'jobId');
    await s.refused(() => s.post('/api/jobs/cancel', { jobId: 'no-such-job' }), 404);
    expect(await s.post('/api/jobs/cancel', { jobId: 'c-2', by: 'dave' })).toEqual({ status: 200, body: { cancelled: true, stopping: false } });
    const job = (await s.get('/api/jobs', { key: 'cancel me', status: 'cancelled' })).body.jobs;
    expect(job).toEqual([expect.objectContaining({ jobId: 'c-2', finishReason: expect.stringContaining('dave') })]);
  });
});

describe('the server', () => {
  it('a body over the limit gets 413 and nothing is written', async () => {
    const args = { blob: 'x'.repeat(MAX_ARGS_BYTES + 100 * 1024) };
    await s.refused(() => s.post('/api/jobs', { name: 'big', args }), 413);
  });

  it('args within the ledger\'s limit fit in a body', async () => {
    const args = { blob: 'x'.repeat(MAX_ARGS_BYTES - 1024) };
    expect((await s.post('/api/jobs', { name: 'big-enough', args })).status).toBe(201);
  });

  it('a body that is not JSON: 400 naming the body (text) or 415 (other media types); an unknown route 404; all as JSON', async () => {
    const before = await s.eventCount();
    const post = (type: string) => fetch(`${s.url}/api/jobs`, { method: 'POST', headers: { 'content-type': type, authorization: `Bearer ${TOKEN}` }, body: 'name=x' });
    const text = await post('text/plain');
    expect(text.status).toBe(400);
    expect(await text.json()).toMatchObject({ field: '(body)' });
    const form = await post('application/x-www-form-urlencoded');
    expect(form.status).toBe(415);
    expect(await form.json()).toMatchObject({ error: expect.any(String) });
    expect(await s.eventCount()).toBe(before);
    const missing = await fetch(`${s.url}/api/nothing/here`);
    expect(missing.status).toBe(404);
    expect(missing.headers.get('content-type')).toContain('application/json');
    expect(await missing.json()).toMatchObject({ error: expect.stringContaining('/api/nothing/here') });
  });
});

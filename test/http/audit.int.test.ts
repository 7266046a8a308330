import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from './support.js';

// GET /api/audit?key=K | job=ID: the handoffs and events, read from the ledger.

let s: TestServer;
const KEY = 'audit/ключ 1';

beforeAll(async () => {
  s = await startTestServer();
  await s.ledger.enqueueMany([
    { name: 'a', key: KEY, limit: 1, jobId: 'au-1' },
    { name: 'a', key: KEY, jobId: 'au-2' },
  ]);
  await s.start(KEY, 'au-1', 'w-1');
  await s.post('/api/keys/release', { key: KEY, jobId: 'au-1', by: 'erin' });
  await s.stopped(KEY, 'au-1');
  await s.ledger.enqueue({ name: 'a', key: 'audit home', limit: 1, jobId: 'au-g', limits: [{ key: 'audit limit', limit: 1 }] });
});

afterAll(async () => {
  await s.close();
});

describe('GET /api/audit', () => {
  it('?key=: every handoff of the key in order, with the events behind them', async () => {
    const { status, body } = await s.get('/api/audit', { key: KEY });
    expect(status).toBe(200);
    expect(body.handoffs).toEqual([
      expect.objectContaining({ key: KEY, jobId: 'au-1', how: 'acquired', workerId: 'w-1', attempt: 1, reason: 'revoked', by: 'erin' }),
      expect.objectContaining({ key: KEY, jobId: 'au-2', how: 'promoted', releasedAt: null, reason: null }),
    ]);
    const types = body.events.map((e: { type: string }) => e.type);
    expect(types).toEqual(expect.arrayContaining(['JobEnqueued', 'SlotAcquired', 'JobParked', 'JobStarted', 'LeaseRevoked', 'SlotReleased', 'JobPromoted']));
    expect(body.events.every((e: { stream: string }) => e.stream === `key:${KEY}`)).toBe(true);
  });

  it('?job=: the handoffs of one job', async () => {
    const { status, body } = await s.get('/api/audit', { job: 'au-2' });
    expect(status).toBe(200);
    expect(body.handoffs.map((h: { jobId: string }) => h.jobId)).toEqual(['au-2']);
  });

  it('?key= of a limit key: the jobs of other keys holding its slots, named with their key; each event in words', async () => {
    const { status, body } = await s.get('/api/audit', { key: 'audit limit' });
    expect(status).toBe(200);
    expect(body.handoffs).toEqual([expect.objectContaining({ key: 'audit limit', jobId: 'au-g', leaseId: 'au-g:1', home: 'audit home', limits: ['audit limit'], how: 'acquired', reason: null })]);
    expect(body.events.map((e: { type: string }) => e.type)).toEqual(['KeyLimitSet', 'LimitHeld']);
    expect(body.eventsInWords).toEqual(['limit set to 1, lease 30 s', 'job au-g of key audit home holds a slot of this key (lease au-g:1, under limits audit limit)']);
    const home = await s.get('/api/audit', { key: 'audit home' });
    expect(home.body.handoffs).toEqual([expect.objectContaining({ jobId: 'au-g', limits: ['audit limit'] })]);
    expect(home.body.handoffs[0]).not.toHaveProperty('home');
  });

  it('400 naming key when neither or both are given, or a field is unknown; 404 for an unknown key or job', async () => {
    const neither = await s.get('/api/audit');
    expect(neither).toMatchObject({ status: 400, body: { field: 'key' } });
    expect((await s.get('/api/audit', { key: KEY, job: 'au-1' })).body).toMatchObject({ field: 'key' });
    expect((await s.get('/api/audit', { jobId: 'au-1' })).body).toMatchObject({ field: 'jobId' });
    expect((await s.get('/api/audit', { key: 'unknown key' })).status).toBe(404);
    expect((await s.get('/api/audit', { job: 'unknown-job' })).status).toBe(404);
  });
});

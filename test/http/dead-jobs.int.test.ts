import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyStream } from '../../src/domain/streams.js';
import { startTestServer, type TestServer } from './support.js';

// The dead-job, explain and history routes over a real ledger: the JSON each answers with (the
// shapes routes/jobs.ts documents for the page), and 400/404/409 with nothing written.

let s: TestServer;

beforeAll(async () => {
  s = await startTestServer();
});

afterAll(async () => {
  await s?.close();
});

/** A job of `key` that ran once and failed for good (maxAttempts 1). */
const dies = async (key: string, jobId: string) => {
  await s.ledger.enqueue({ name: 'send', key, jobId, maxAttempts: 1, queue: 'mail' });
  await s.start(key, jobId);
  const leaseId = (await s.ledger.keyState(key)).state.jobs[jobId]!.lease!.leaseId;
  const failed = await s.ledger.execute(keyStream(key), { type: 'Fail', jobId, leaseId, error: 'smtp 550', jitter: 0 });
  if (E.isLeft(failed)) throw new Error(failed.left.tag);
};

describe('dead jobs over HTTP', () => {
  it('lists dead jobs with their error and attempts; retries them with who; the audit names who', async () => {
    await dies('http-dead', 'hd1');
    const dead = (await s.get('/api/jobs', { status: 'dead', queue: 'mail', name: 'send' })).body.jobs;
    expect(dead).toEqual([expect.objectContaining({ jobId: 'hd1', key: 'http-dead', status: 'dead', attempts: 1, maxAttempts: 1, lastError: 'smtp 550', finishReason: 'failed; no attempt left (1/1)', finishedAt: expect.any(Number) })]);
    expect(await s.post('/api/jobs/retry', { jobIds: ['hd1'], by: 'alice' })).toEqual({ status: 200, body: { retried: [{ jobId: 'hd1', status: 'acquired' }] } });
    const history = (await s.get('/api/jobs/history', { jobId: 'hd1' })).body;
    expect(history).toMatchObject({ jobId: 'hd1', key: 'http-dead', stream: 'key:http-dead' });
    expect(history.events.find((e: { type: string }) => e.type === 'JobRetried')).toMatchObject({ by: 'alice', via: 'http', inWords: expect.stringContaining('retried by alice') });
    // The job's own events (the key's KeyLimitSet is not one of them).
    expect(history.events.map((e: { type: string }) => e.type)).toEqual(['JobEnqueued', 'SlotAcquired', 'JobStarted', 'JobFailed', 'SlotReleased', 'JobDead', 'JobRetried', 'SlotAcquired']);
  });

  it('discards dead jobs of a key; the list no longer shows them', async () => {
    await dies('http-dis', 'hx1');
    expect(await s.post('/api/jobs/discard-dead', { key: 'http-dis' })).toEqual({ status: 200, body: { discarded: ['hx1'] } });
    expect((await s.get('/api/jobs', { key: 'http-dis', status: 'dead' })).body.jobs).toEqual([]);
    const history = (await s.get('/api/jobs/history', { jobId: 'hx1' })).body;
    expect(history.events.at(-1)).toMatchObject({ type: 'DeadDiscarded', by: 'http 127.0.0.1', via: 'http' });
  });

  it('explains a parked job: its place, the holder ahead and its lease, now or at a moment', async () => {
    await s.ledger.enqueue({ name: 'send', key: 'http-ex', jobId: 'he1' });
    await s.start('http-ex', 'he1', 'worker-9');
    await s.ledger.enqueue({ name: 'send', key: 'http-ex', jobId: 'he2' });
    const now = await s.get('/api/jobs/explain', { jobId: 'he2' });
    expect(now.status).toBe(200);
    // worker-9 never announced itself (no heartbeat in workers): nobody is known to run he1.
    expect(now.body).toMatchObject({
      jobId: 'he2',
      status: 'parked',
      limits: [{ key: 'http-ex', own: true, limit: 1, holding: 1, blocking: true, place: { n: 1, of: 1 }, holders: [{ jobId: 'he1', lease: { state: 'worker-gone', workerId: 'worker-9' } }] }],
      waits: [{ kind: 'parked', until: null, on: [{ key: 'http-ex', why: 'full' }] }],
    });
    const before = await s.get('/api/jobs/explain', { jobId: 'he2', at: String(Date.UTC(2001, 0, 1)) });
    expect(before.body).toMatchObject({ status: 'unknown', asOf: Date.UTC(2001, 0, 1) });
  });

  it('refuses bad input (400), an unknown job (404) and a job that is not dead (409), writing nothing', async () => {
    await s.ledger.enqueue({ name: 'send', key: 'http-alive', jobId: 'ha1' });
    const notDead = await s.refused(() => s.post('/api/jobs/retry', { jobIds: ['ha1'] }), 409);
    expect(notDead.error).toContain('job ha1 is holding, not dead');
    await s.refused(() => s.post('/api/jobs/discard-dead', { jobIds: ['ha1'] }), 409);
    await s.refused(() => s.post('/api/jobs/retry', { jobIds: ['nobody'] }), 404);
    await s.refused(() => s.post('/api/jobs/retry', { key: 'no such key' }), 404);
    await s.refused(() => s.post('/api/jobs/retry', { jobIds: 'ha1' }), 400, 'jobIds');
    await s.refused(() => s.post('/api/jobs/retry', { jobIds: ['ha1'], key: 'http-alive' }), 400, 'jobIds');
    await s.refused(() => s.post('/api/jobs/retry', { jobId: 'ha1' }), 400, 'jobId');
    await s.refused(() => s.get('/api/jobs/explain', { jobId: 'ha1', at: 'soon' }), 400, 'at');
    await s.refused(() => s.get('/api/jobs/explain', { jobId: 'nobody' }), 404);
    await s.refused(() => s.get('/api/jobs/history', {}), 400, 'jobId');
    await s.refused(() => s.get('/api/jobs', { status: 'sleeping' }), 400, 'status');
  });
});

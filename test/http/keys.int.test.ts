import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyStream } from '../../src/domain/streams.js';
import { appendByHand } from '../support/bad-events.js';
import { AWKWARD_KEYS, TOKEN, startTestServer, type TestServer } from './support.js';

// GET /api/keys, GET /api/keys/detail, POST /api/keys/{release,discard,limit} over a real ledger.

let s: TestServer;

beforeAll(async () => {
  s = await startTestServer();
});

afterAll(async () => {
  await s.close();
});

/** One holder and one parked job on a limit-1 key. */
const seed = async (key: string, prefix: string) => {
  await s.ledger.enqueue({ name: 'work', key, limit: 1, jobId: `${prefix}-a` });
  await s.ledger.enqueue({ name: 'work', key, jobId: `${prefix}-b` });
};

describe('reads', () => {
  beforeAll(async () => {
    for (const [i, key] of AWKWARD_KEYS.entries()) await seed(key, `read${i}`);
    await s.ledger.enqueue({ name: 'work', key: 'roomy', limit: 3, jobId: 'roomy-a' });
    await s.ledger.enqueue({ name: 'later', key: 'roomy', jobId: 'roomy-s', delayMs: 3_600_000 });
  });

  it('GET /api/keys: a row per key, keys exactly as enqueued, and the cards\' totals', async () => {
    const { status, body } = await s.get('/api/keys');
    expect(status).toBe(200);
    const keys = body.keys.map((k: { key: string }) => k.key);
    for (const key of AWKWARD_KEYS) expect(keys).toContain(key);
    const awkward = body.keys.find((k: { key: string }) => k.key === AWKWARD_KEYS[2]);
    expect(awkward).toMatchObject({ limit: 1, inUse: 1, parked: 1, scheduled: 0, atLimit: true, leaseState: 'unstarted' });
    expect(awkward.oldestParkedAt).toBeTypeOf('number');
    expect(body.keys.find((k: { key: string }) => k.key === 'roomy')).toMatchObject({ limit: 3, inUse: 1, parked: 0, scheduled: 1, atLimit: false, oldestParkedAt: null });
    expect(body.totals).toMatchObject({
      keys: AWKWARD_KEYS.length + 1,
      keysAtLimit: AWKWARD_KEYS.length,
      slotsHeld: AWKWARD_KEYS.length + 1,
      parked: AWKWARD_KEYS.length,
      scheduled: 1,
    });
    expect(body.totals.oldestParkedAt).toBe(Math.min(...body.keys.flatMap((k: { oldestParkedAt: number | null }) => (k.oldestParkedAt === null ? [] : [k.oldestParkedAt]))));
    expect(body.now).toBeTypeOf('number');
  });

  it.each(AWKWARD_KEYS.map((key, i) => [key, i] as const))('GET /api/keys/detail?key=%j: holders, parked in promotion order, recent handoffs', async (key, i) => {
    const { status, body } = await s.get('/api/keys/detail', { key });
    expect(status).toBe(200);
    expect(body).toMatchObject({ key, limit: 1 });
    expect(body.holders).toEqual([expect.objectContaining({ jobId: `read${i}-a`, name: 'work', how: 'acquired', leaseState: 'unstarted', expiresAt: null, workerId: null })]);
    expect(body.parked).toEqual([expect.objectContaining({ jobId: `read${i}-b`, name: 'work' })]);
    expect(body.handoffs).toEqual([expect.objectContaining({ jobId: `read${i}-a`, how: 'acquired', releasedAt: null, reason: null })]);
  });

  it('GET /api/keys/detail shows scheduled jobs and a started holder with its worker', async () => {
    await s.start('roomy', 'roomy-a', 'worker-7');
    const { body } = await s.get('/api/keys/detail', { key: 'roomy' });
    expect(body.holders).toEqual([expect.objectContaining({ jobId: 'roomy-a', workerId: 'worker-7', attempt: 1 })]);
    expect(body.scheduled).toEqual([expect.objectContaining({ jobId: 'roomy-s', name: 'later' })]);
  });

  it('GET /api/keys/detail: 400 naming key when it is missing or empty, or a query field is unknown; 404 for an unknown key', async () => {
    expect(await s.refused(() => s.get('/api/keys/detail'), 400, 'key')).toMatchObject({ error: expect.stringContaining('required') });
    await s.refused(() => s.get('/api/keys/detail', { key: '' }), 400, 'key');
    await s.refused(() => s.get('/api/keys/detail', { key: 'roomy', kye: 'x' }), 400, 'kye');
    await s.refused(() => s.get('/api/keys/detail', { key: 'no such key' }), 404);
    for (const limit of ['0', '1001', 'ten']) await s.refused(() => s.get('/api/keys/detail', { key: 'roomy', limit }), 400, 'limit');
  });

  it('GET /api/keys/detail?limit=N lists the first N of each list and counts them all', async () => {
    const whole = (await s.get('/api/keys/detail', { key: AWKWARD_KEYS[0]! })).body;
    expect(whole).toMatchObject({ listed: 100, counts: { holders: 1, ownHolders: 1, parked: 1, ownParked: 1, scheduled: 0 } });
    const { status, body } = await s.get('/api/keys/detail', { key: AWKWARD_KEYS[0]!, limit: '1' });
    expect(status).toBe(200);
    expect(body).toMatchObject({ listed: 1, counts: whole.counts, holders: whole.holders, parked: whole.parked });
  });
});

describe('POST /api/keys/release', () => {
  it('needs the bearer token: 401 without it or with a wrong one, and nothing is written', async () => {
    await seed('auth/key', 'auth');
    const body = await s.refused(() => s.post('/api/keys/release', { key: 'auth/key' }, null), 401);
    expect(body.error).toContain('Bearer');
    await s.refused(() => s.post('/api/keys/release', { key: 'auth/key' }, 'wrong'), 401);
    await s.refused(() => s.post('/api/keys/release', { key: 'auth/key' }, `${TOKEN}x`), 401);
    const raw = await fetch(`${s.url}/api/keys/release`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: TOKEN }, body: '{}' });
    expect(raw.status).toBe(401);
    expect(raw.headers.get('www-authenticate')).toContain('Bearer');
    expect((await s.get('/api/keys/detail', { key: 'auth/key' })).body.holders).toHaveLength(1);
  });

  it.each([
    [{}, 'key'],
    [{ key: '' }, 'key'],
    [{ key: 42 }, 'key'],
    [{ key: 'bad/release', jobId: 7 }, 'jobId'],
    [{ key: 'bad/release', jobid: 'bad-a' }, 'jobid'],
    [{ key: 'bad/release', by: '' }, 'by'],
    [[{ key: 'bad/release' }], '(body)'],
    ['bad/release', '(body)'],
  ])('bad body %j: 400 naming %s, nothing written', async (body, field) => {
    if ((await s.get('/api/keys/detail', { key: 'bad/release' })).status === 404) await seed('bad/release', 'bad');
    await s.refused(() => s.post('/api/keys/release', body), 400, field);
  });

  it('unparsable JSON is a 400 naming the body', async () => {
    const before = await s.eventCount();
    const response = await fetch(`${s.url}/api/keys/release`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, body: '{"key": ' });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ field: '(body)' });
    expect(await s.eventCount()).toBe(before);
  });

  it('404 for an unknown key', async () => {
    await s.refused(() => s.post('/api/keys/release', { key: 'never enqueued' }), 404);
  });

  it.each(AWKWARD_KEYS.map((key, i) => [key, i] as const))('releases the running holder of %j by job id: it is stopping until its handler stopped, then its parked job is promoted; recorded with who did it', async (key, i) => {
    await seed(`rel:${key}`, `rel${i}`);
    await s.start(`rel:${key}`, `rel${i}-a`);
    const { status, body } = await s.post('/api/keys/release', { key: `rel:${key}`, jobId: `rel${i}-a`, by: 'alice' });
    expect(status).toBe(200);
    expect(body).toEqual({ released: [`rel${i}-a`], stopping: [`rel${i}-a`] });
    const stopping = (await s.get('/api/keys/detail', { key: `rel:${key}` })).body;
    expect(stopping.holders).toEqual([expect.objectContaining({ jobId: `rel${i}-a`, revoked: { by: 'alice', at: expect.any(Number), cancels: false } })]);
    await s.stopped(`rel:${key}`, `rel${i}-a`);
    const detail = (await s.get('/api/keys/detail', { key: `rel:${key}` })).body;
    expect(detail.holders).toEqual([expect.objectContaining({ jobId: `rel${i}-b`, how: 'promoted' })]);
    expect(detail.parked).toEqual([]);
    expect(detail.handoffs[1]).toMatchObject({ jobId: `rel${i}-a`, reason: 'revoked', by: 'alice' });
  });

  it('without jobId releases every holder; `by` defaults to the client address', async () => {
    await s.ledger.enqueueMany([1, 2, 3].map((n) => ({ name: 'work', key: 'rel:all', limit: 2, jobId: `all-${n}` })));
    await s.start('rel:all', 'all-1');
    await s.start('rel:all', 'all-2');
    const { body } = await s.post('/api/keys/release', { key: 'rel:all' });
    expect(body.released.sort()).toEqual(['all-1', 'all-2']);
    expect(body.stopping.sort()).toEqual(['all-1', 'all-2']);
    for (const jobId of ['all-1', 'all-2']) await s.stopped('rel:all', jobId);
    const detail = (await s.get('/api/keys/detail', { key: 'rel:all' })).body;
    expect(detail.holders.map((h: { jobId: string }) => h.jobId)).toEqual(['all-3']);
    expect(detail.handoffs.filter((h: { reason: string }) => h.reason === 'revoked').map((h: { by: string }) => h.by)).toEqual(['http 127.0.0.1', 'http 127.0.0.1']);
  });

  it('force: a running holder whose worker is gone lets its slot go at once, recorded as forced', async () => {
    await seed('rel:forced', 'forced');
    await s.start('rel:forced', 'forced-a');
    const { body } = await s.post('/api/keys/release', { key: 'rel:forced', jobId: 'forced-a', by: 'alice', force: true });
    expect(body).toEqual({ released: ['forced-a'], stopping: [] });
    const detail = (await s.get('/api/keys/detail', { key: 'rel:forced' })).body;
    expect(detail.holders).toEqual([expect.objectContaining({ jobId: 'forced-b', how: 'promoted' })]);
    const revoked = (await s.ledger.audit({ key: 'rel:forced' })).events.find((e) => e.type === 'LeaseRevoked');
    expect(revoked?.data).toMatchObject({ jobId: 'forced-a', by: 'alice', force: true });
    await s.refused(() => s.post('/api/keys/release', { key: 'rel:forced', force: 'yes' }), 400, 'force');
  });

  it('a job that holds no slot is refused (4xx) and nothing is written', async () => {
    await seed('rel:refused', 'refused');
    const before = await s.eventCount();
    const { status } = await s.post('/api/keys/release', { key: 'rel:refused', jobId: 'refused-b' });
    expect([404, 409]).toContain(status);
    expect(await s.eventCount()).toBe(before);
  });
});

describe('POST /api/keys/discard', () => {
  it('discards the named parked jobs, or all of them; the holder keeps its slot', async () => {
    await s.ledger.enqueueMany([1, 2, 3, 4].map((n) => ({ name: 'work', key: 'dis card/ü', limit: 1, jobId: `dis-${n}` })));
    expect(await s.refused(() => s.post('/api/keys/discard', { key: 'dis card/ü', jobIds: ['dis-2'] }, null), 401)).toBeDefined();
    const one = await s.post('/api/keys/discard', { key: 'dis card/ü', jobIds: ['dis-2'], by: 'bob' });
    expect(one).toEqual({ status: 200, body: { discarded: ['dis-2'] } });
    expect((await s.get('/api/keys/detail', { key: 'dis card/ü' })).body.parked.map((p: { jobId: string }) => p.jobId)).toEqual(['dis-3', 'dis-4']);
    const rest = await s.post('/api/keys/discard', { key: 'dis card/ü' });
    expect(rest.body.discarded.sort()).toEqual(['dis-3', 'dis-4']);
    const detail = (await s.get('/api/keys/detail', { key: 'dis card/ü' })).body;
    expect(detail.parked).toEqual([]);
    expect(detail.holders.map((h: { jobId: string }) => h.jobId)).toEqual(['dis-1']);
    const jobs = (await s.get('/api/jobs', { key: 'dis card/ü', status: 'discarded' })).body.jobs;
    expect(jobs.map((j: { jobId: string }) => j.jobId).sort()).toEqual(['dis-2', 'dis-3', 'dis-4']);
  });

  it.each([
    [{ jobIds: ['x'] }, 'key'],
    [{ key: 'dis card/ü', jobIds: 'dis-1' }, 'jobIds'],
    [{ key: 'dis card/ü', jobIds: ['ok', ''] }, 'jobIds[1]'],
    [{ key: 'dis card/ü', all: true }, 'all'],
  ])('bad body %j: 400 naming %s, nothing written', async (body, field) => {
    await s.refused(() => s.post('/api/keys/discard', body), 400, field);
  });

  it('404 for an unknown key', async () => {
    await s.refused(() => s.post('/api/keys/discard', { key: 'nobody' }), 404);
  });
});

describe('POST /api/keys/limit', () => {
  it('raising the limit promotes parked jobs at once', async () => {
    await s.ledger.enqueueMany([1, 2, 3].map((n) => ({ name: 'work', key: 'lim/ит', limit: 1, jobId: `lim-${n}` })));
    await s.refused(() => s.post('/api/keys/limit', { key: 'lim/ит', limit: 3 }, null), 401);
    const { status, body } = await s.post('/api/keys/limit', { key: 'lim/ит', limit: 3, by: 'carol' });
    expect(status).toBe(200);
    expect(body.limit).toBe(3);
    expect(body.promoted.sort()).toEqual(['lim-2', 'lim-3']);
    const row = (await s.get('/api/keys')).body.keys.find((k: { key: string }) => k.key === 'lim/ит');
    expect(row).toMatchObject({ limit: 3, inUse: 3, parked: 0 });
  });

  it.each([
    [{ key: 'lim/ит' }, 'limit'],
    [{ key: 'lim/ит', limit: 0 }, 'limit'],
    [{ key: 'lim/ит', limit: 1.5 }, 'limit'],
    [{ key: 'lim/ит', limit: '2' }, 'limit'],
    [{ limit: 2 }, 'key'],
  ])('bad body %j: 400 naming %s, nothing written', async (body, field) => {
    await s.refused(() => s.post('/api/keys/limit', body), 400, field);
  });

  it('404 for an unknown key', async () => {
    await s.refused(() => s.post('/api/keys/limit', { key: 'nobody', limit: 2 }), 404);
  });
});

describe('POST /api/keys/pause and /api/keys/resume', () => {
  it('pause needs the token, records who and why, and shows on the key; resume promotes; a second pause is a 409', async () => {
    await s.ledger.enqueueMany([1, 2].map((n) => ({ name: 'work', key: 'pause/ключ', limit: 1, jobId: `pz-${n}` })));
    await s.refused(() => s.post('/api/keys/pause', { key: 'pause/ключ' }, null), 401);
    const paused = await s.post('/api/keys/pause', { key: 'pause/ключ', by: 'carol', reason: 'vendor outage' });
    expect(paused).toEqual({ status: 200, body: { paused: true } });
    const row = (await s.get('/api/keys')).body.keys.find((k: { key: string }) => k.key === 'pause/ключ');
    expect(row.paused).toMatchObject({ by: 'carol', reason: 'vendor outage' });
    expect((await s.get('/api/keys/detail', { key: 'pause/ключ' })).body.paused).toMatchObject({ by: 'carol' });
    await s.refused(() => s.post('/api/keys/pause', { key: 'pause/ключ' }), 409);
    const resumed = await s.post('/api/keys/resume', { key: 'pause/ключ', by: 'carol' });
    expect(resumed).toEqual({ status: 200, body: { promoted: [] } });
    await s.refused(() => s.post('/api/keys/resume', { key: 'pause/ключ' }), 409);
  });

  it.each([
    [{ key: 'pause/ключ', reason: '' }, 'reason'],
    [{ key: 'pause/ключ', reason: 'a\u0000b' }, 'reason'],
    [{ key: 'pause/ключ', reason: 5 }, 'reason'],
    [{}, 'key'],
  ])('bad body %j: 400 naming %s, nothing written', async (body, field) => {
    await s.refused(() => s.post('/api/keys/pause', body), 400, field);
  });

  it('404 for an unknown key', async () => {
    await s.refused(() => s.post('/api/keys/pause', { key: 'nobody' }), 404);
  });
});

describe('a quarantined key (its stream holds an event this release cannot decode)', () => {
  it('regression: its detail is served from the read models (with the quarantine, no handoffs) instead of a 500; its audit is a 409 naming where the event is', async () => {
    const key = 'quarantined-view';
    await s.ledger.enqueue({ name: 'work', key, limit: 1, jobId: 'qv-a' });
    const placed = await appendByHand(s.db.pool, keyStream(key), 'an unknown type');
    // The writer meets the event (and records the quarantine) when it next decides on the key.
    await expect(s.ledger.enqueue({ name: 'work', key, jobId: 'qv-b' })).rejects.toThrow('does not decode');

    const detail = await s.get('/api/keys/detail', { key });
    expect(detail.status).toBe(200);
    expect(detail.body.quarantine).toMatchObject({ revision: placed.revision });
    expect(detail.body.handoffs).toEqual([]);

    const audit = await s.get('/api/audit', { key });
    expect(audit.status).toBe(409);
    expect(audit.body).toMatchObject({ stream: keyStream(key), revision: placed.revision, position: `${placed.position.commit}/${placed.position.prepare}` });
    expect(audit.body.error).toContain('does not decode');
  });
});

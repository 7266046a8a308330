import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { registerFreshAnswers } from '../../src/adapters/http/fresh-answers.js';

// The polled reads answered at most once per freshMs for each URL (src/adapters/http/fresh-answers.ts),
// on a server of their own: a handler that counts its reads, and a clock the test moves.

let app: FastifyInstance;
let kept: () => number;
let now = 0;
let reads = 0;
/** What the next read of /api/keys answers with; a promise holds the read open. */
let next: () => Promise<{ status: number; body: object }> = async () => ({ status: 200, body: { read: reads } });

const serve = async (freshMs: number) => {
  app = Fastify();
  ({ kept } = registerFreshAnswers(app, { freshMs, clock: () => now }));
  app.get('/api/keys', async (_request, reply) => {
    reads++;
    const { status, body } = await next();
    reply.header('etag', `W/"t${reads}"`);
    return reply.code(status).send(body);
  });
  app.get('/api/other', async () => ({ other: ++reads }));
  app.post('/api/keys/pause', async () => ({ paused: true }));
  await app.ready();
};

afterEach(async () => {
  await app?.close();
  now = 0;
  reads = 0;
  next = async () => ({ status: 200, body: { read: reads } });
});

const get = (url: string, etag?: string) => app.inject({ method: 'GET', url, headers: etag === undefined ? {} : { 'if-none-match': etag } });

describe('fresh answers', () => {
  it('a URL answered less than freshMs ago is answered again without a read: its body, its ETag, 304 for a poll that holds it', async () => {
    await serve(1_000);
    const first = await get('/api/keys?limit=5');
    expect([first.statusCode, first.json(), first.headers.etag]).toEqual([200, { read: 1 }, 'W/"t1"']);
    now = 999;
    const again = await get('/api/keys?limit=5');
    expect([again.statusCode, again.json(), again.headers.etag]).toEqual([200, { read: 1 }, 'W/"t1"']);
    expect(again.headers['content-type']).toBe(first.headers['content-type']);
    expect((await get('/api/keys?limit=5', 'W/"t1"')).statusCode).toBe(304);
    // Another URL is another question; a read that is not polled is never kept.
    expect((await get('/api/keys?limit=6')).json()).toEqual({ read: 2 });
    expect((await get('/api/other')).json()).toEqual({ other: 3 });
    expect((await get('/api/other')).json()).toEqual({ other: 4 });
    // Its age counts from when its read began.
    now = 1_000;
    expect((await get('/api/keys?limit=5')).json()).toEqual({ read: 5 });
  });

  it('a URL not asked again within freshMs is let go: a server that is only read keeps the answers of its last freshMs, not of every URL it ever answered', async () => {
    await serve(1_000);
    for (let i = 0; i < 50; i++) await get(`/api/keys?offset=${i}`);
    expect(kept()).toBe(50);
    now = 600;
    for (let i = 0; i < 5; i++) await get(`/api/keys?limit=${i + 1}`);
    expect(kept()).toBe(55);
    now = 1_000;
    await get('/api/keys?offset=0');
    // The 50 of time 0 are past freshMs; the 5 of 600 and the one just read are kept.
    expect(kept()).toBe(6);
    // One of 600 is still answered without a read.
    expect((await get('/api/keys?limit=1')).json()).toEqual({ read: 51 });
    expect(reads).toBe(56);
  });

  it('requests that arrive while the read runs wait for it', async () => {
    await serve(1_000);
    let finish!: () => void;
    next = () => new Promise((resolve) => (finish = () => resolve({ status: 200, body: { read: 1 } })));
    const waiting = [get('/api/keys'), get('/api/keys'), get('/api/keys')];
    await new Promise((resolve) => setTimeout(resolve, 20));
    finish();
    expect((await Promise.all(waiting)).map((r) => r.json())).toEqual([{ read: 1 }, { read: 1 }, { read: 1 }]);
    expect(reads).toBe(1);
  });

  it('only a 200 is kept: an error, or a 304 of the handler, is each request\'s own', async () => {
    await serve(1_000);
    next = async () => ({ status: 503, body: { error: 'read budget spent' } });
    expect((await get('/api/keys')).statusCode).toBe(503);
    next = async () => ({ status: 200, body: { read: reads } });
    expect((await get('/api/keys')).json()).toEqual({ read: 2 });
    expect(reads).toBe(2);
  });

  it('a write through the server forgets them, and an answer read while one ran is not kept', async () => {
    await serve(1_000);
    await get('/api/keys');
    await app.inject({ method: 'POST', url: '/api/keys/pause', payload: {} });
    expect((await get('/api/keys')).json()).toEqual({ read: 2 });
    // A read that began before a write and ends after it.
    let finish!: () => void;
    next = () => new Promise((resolve) => (finish = () => resolve({ status: 200, body: { read: 3 } })));
    const during = get('/api/keys?x=1');
    await new Promise((resolve) => setTimeout(resolve, 20));
    await app.inject({ method: 'POST', url: '/api/keys/pause', payload: {} });
    finish();
    expect((await during).json()).toEqual({ read: 3 });
    next = async () => ({ status: 200, body: { read: reads } });
    expect((await get('/api/keys?x=1')).json()).toEqual({ read: 4 });
  });

  it('freshMs 0 keeps nothing', async () => {
    await serve(0);
    await get('/api/keys');
    expect((await get('/api/keys')).json()).toEqual({ read: 2 });
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_ARGS_BYTES, MAX_JSON_DEPTH } from '../../src/domain/values.js';
import { TOKEN, startTestServer, type TestServer } from './support.js';

// Input PostgreSQL or JSON cannot store — NUL, lone UTF-16 surrogates, nesting thousands deep —
// in every field of every route: a 400 naming the field, never a 500, and nothing written.

let s: TestServer;

beforeAll(async () => {
  s = await startTestServer();
  // A key and a job that exist, so a refusal is about the input, not an unknown key or job.
  await s.post('/api/jobs', { name: 'seed', key: 'k', jobId: 'seed-1' });
});

afterAll(async () => {
  await s.close();
});

const NUL = 'a\u0000b';
const LONE = 'a\ud800b';

/** POSTs `body` as it is (any text), with the token. */
const postRaw = async (path: string, body: string): Promise<{ status: number; body: any }> => {
  const response = await fetch(`${s.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, body });
  return { status: response.status, body: await response.json() };
};

describe('a string PostgreSQL cannot store is a 400 naming the field, and nothing is written', () => {
  it.each([
    ['/api/jobs', { name: NUL }, 'name'],
    ['/api/jobs', { name: LONE }, 'name'],
    ['/api/jobs', { name: 'x', key: NUL }, 'key'],
    ['/api/jobs', { name: 'x', key: LONE }, 'key'],
    ['/api/jobs', { name: 'x', key: 'k', jobId: NUL }, 'jobId'],
    ['/api/jobs', { name: 'x', key: 'k', jobId: LONE }, 'jobId'],
    ['/api/jobs', { name: 'x', by: NUL }, 'by'],
    ['/api/jobs', { name: 'x', by: LONE }, 'by'],
    ['/api/jobs', { name: 'x', args: { a: { b: NUL } } }, 'args.a.b'],
    ['/api/jobs', { name: 'x', args: { a: { [NUL]: 1 } } }, 'args.a'],
    ['/api/jobs', { name: 'x', args: { list: ['ok', LONE] } }, 'args.list[1]'],
    ['/api/jobs', { name: 'x', args: LONE }, 'args'],
    ['/api/jobs/cancel', { jobId: NUL }, 'jobId'],
    ['/api/jobs/cancel', { jobId: 'seed-1', by: LONE }, 'by'],
    ['/api/keys/release', { key: NUL }, 'key'],
    ['/api/keys/release', { key: 'k', jobId: LONE }, 'jobId'],
    ['/api/keys/release', { key: 'k', by: NUL }, 'by'],
    ['/api/keys/discard', { key: LONE }, 'key'],
    ['/api/keys/discard', { key: 'k', jobIds: ['ok', NUL] }, 'jobIds[1]'],
    ['/api/keys/limit', { key: NUL, limit: 2 }, 'key'],
    ['/api/keys/limit', { key: 'k', limit: 2, by: LONE }, 'by'],
  ])('POST %s %j', async (path, body, field) => {
    const error = await s.refused(() => s.post(path, body), 400, field);
    expect(error.error).toMatch(/must not contain a (NUL|lone UTF-16 surrogate)|property name with a NUL/);
  });

  it.each([
    ['/api/keys/detail', { key: NUL }, 'key'],
    ['/api/jobs', { key: NUL }, 'key'],
    ['/api/jobs', { status: NUL }, 'status'],
    ['/api/jobs', { cursor: NUL }, 'cursor'],
    ['/api/audit', { key: NUL }, 'key'],
    ['/api/audit', { job: NUL }, 'job'],
  ])('GET %s?%j', async (path, query, field) => {
    await s.refused(() => s.get(path, query), 400, field);
  });

  it('a lone surrogate in a key does not become U+FFFD: the two keys stay apart', async () => {
    await s.refused(() => s.post('/api/jobs', { name: 'x', key: 'tenant\udc00' }), 400, 'key');
    expect((await s.post('/api/jobs', { name: 'x', key: 'tenant\ufffd', limit: 1 })).status).toBe(201);
    expect((await s.get('/api/keys/detail', { key: 'tenant\ufffd' })).body).toMatchObject({ key: 'tenant\ufffd', limit: 1 });
  });
});

describe('nesting and size', () => {
  it(`args nested ${MAX_JSON_DEPTH} deep are accepted; 10,000 deep get a 400 naming the place, not a stack overflow`, async () => {
    const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
    expect((await postRaw('/api/jobs', `{"name":"deep-ok","args":${nested(MAX_JSON_DEPTH)}}`)).status).toBe(201);
    const body = await s.refused(() => postRaw('/api/jobs', `{"name":"deep","args":${nested(10_000)}}`), 400);
    expect(body.field).toBe(`args${'[0]'.repeat(MAX_JSON_DEPTH)}`);
    expect(body.error).toContain(`is nested more than ${MAX_JSON_DEPTH} deep`);
  });

  it('a body nested 10,000 deep in another field, or as the whole body, is a 400', async () => {
    const deepObject = '{"a":'.repeat(10_000) + '1' + '}'.repeat(10_000);
    await s.refused(() => postRaw('/api/jobs', `{"name":${deepObject}}`), 400, 'name');
    await s.refused(() => postRaw('/api/keys/discard', `{"key":"k","jobIds":${'['.repeat(10_000)}${']'.repeat(10_000)}}`), 400, 'jobIds[0]');
    await s.refused(() => postRaw('/api/keys/release', deepObject), 400, 'a');
    await s.refused(() => postRaw('/api/jobs', '['.repeat(500_000) + ']'.repeat(500_000)), 400, '(body)');
  });

  it('a body over the limit is a 413 naming the body', async () => {
    await s.refused(() => s.post('/api/jobs', { name: 'big', args: { blob: 'x'.repeat(MAX_ARGS_BYTES + 100 * 1024) } }), 413, '(body)');
  });

  it('a body that is not JSON is a 400 naming the body', async () => {
    for (const text of ['{', '{"name":"x",}', '', 'null', '"\\u0000"', '{"name":"\\ud800"']) {
      await s.refused(() => postRaw('/api/jobs', text), 400, '(body)');
    }
  });
});

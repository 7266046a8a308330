import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOKEN, reachableAddress, startTestServer, type TestServer, type TestServerAccess } from './support.js';

// Who may read, and under which Host, by where the server is bound (issue 21): on loopback as
// before (reads need no token; only loopback names are served); off loopback every read needs a
// token unless reads were made public, and the Host must name this server. Real servers: one on
// 127.0.0.1, two on 0.0.0.0 reached at this machine's address.

/** Every read route, with a query it answers 200 to once the job below is enqueued. */
const READS = [
  '/api/keys',
  '/api/workers',
  '/api/queues',
  '/api/keys/detail?key=access%2Fkey',
  '/api/jobs',
  '/api/jobs/explain?jobId=access-1',
  '/api/jobs/history?jobId=access-1',
  '/api/audit?key=access%2Fkey',
  '/metrics',
];

/** The page's own files: no data, served without a token wherever the server is bound. */
const PAGE = ['/', '/app.js', '/ui.js', '/app.css'];

interface Answer {
  readonly status: number;
  readonly body: string;
}

/** A request with the Host header given (fetch sets its own): `host` undefined sends the URL's. */
const send = (url: string, options: { method?: string; host?: string; token?: string; body?: unknown } = {}): Promise<Answer> =>
  new Promise((resolve, reject) => {
    const body = options.body === undefined ? undefined : JSON.stringify(options.body);
    const req = httpRequest(
      url,
      {
        method: options.method ?? 'GET',
        headers: {
          ...(options.host === undefined ? {} : { host: options.host }),
          ...(options.token === undefined ? {} : { authorization: `Bearer ${options.token}` }),
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });

const statuses = async (server: TestServer, paths: readonly string[], options: { token?: string; host?: string } = {}) =>
  Object.fromEntries(await Promise.all(paths.map(async (path) => [path, (await send(`${server.url}${path}`, options)).status] as const)));

const all = (paths: readonly string[], status: number) => Object.fromEntries(paths.map((path) => [path, status]));

const serverWith = async (access: TestServerAccess): Promise<TestServer> => {
  const server = await startTestServer(access);
  await server.ledger.enqueue({ name: 'send', key: 'access/key', jobId: 'access-1', args: { secret: 'in the args' } });
  return server;
};

const servers: TestServer[] = [];
let loopback: TestServer;
let offLoopback: TestServer;
let publicReads: TestServer;

beforeAll(async () => {
  [loopback, offLoopback, publicReads] = await Promise.all([
    serverWith({}),
    serverWith({ host: '0.0.0.0', allowedHosts: ['jobs.example.com'] }),
    serverWith({ host: '0.0.0.0', publicReads: true }),
  ]);
  servers.push(loopback, offLoopback, publicReads);
});

afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

describe('bound to loopback (the default): as before', () => {
  it('reads and the page need no token; writes do', async () => {
    expect(loopback.url).toMatch(/^http:\/\/127\.0\.0\.1:/);
    expect(await statuses(loopback, [...READS, ...PAGE])).toEqual(all([...READS, ...PAGE], 200));
    await loopback.refused(() => loopback.post('/api/keys/limit', { key: 'access/key', limit: 2 }, null), 401);
  });

  it('a Host naming another machine is refused (403), token or not', async () => {
    for (const host of ['attacker.example', 'attacker.example:7070', `${reachableAddress()}:7070`]) {
      expect(await statuses(loopback, ['/', '/api/keys'], { host, token: TOKEN })).toEqual(all(['/', '/api/keys'], 403));
    }
    expect((await send(`${loopback.url}/api/keys`, { host: 'localhost:7070' })).status).toBe(200);
  });
});

describe('bound off loopback (0.0.0.0, reached at this machine\'s address)', () => {
  it('regression (issue 21: off loopback every read was served without a token, job args included): each read is refused (401) without the token, and served with it', async () => {
    expect(await statuses(offLoopback, READS)).toEqual(all(READS, 401));
    expect(await statuses(offLoopback, READS, { token: 'wrong' })).toEqual(all(READS, 401));
    const refused = await send(`${offLoopback.url}/api/jobs/history?jobId=access-1`);
    expect(refused.body).not.toContain('in the args');
    expect(JSON.parse(refused.body)).toEqual({ error: expect.stringContaining('Authorization: Bearer') });
    expect(await statuses(offLoopback, READS, { token: TOKEN })).toEqual(all(READS, 200));
    expect((await send(`${offLoopback.url}/api/jobs/history?jobId=access-1`, { token: TOKEN })).body).toContain('in the args');
    expect((await send(`${offLoopback.url}/metrics`, { token: TOKEN })).body).toContain('jobledger_keys 1');
  });

  it("the page's own files need no token (a browser cannot send one to open it); writes need it as before", async () => {
    expect(await statuses(offLoopback, PAGE)).toEqual(all(PAGE, 200));
    await offLoopback.refused(() => offLoopback.post('/api/keys/limit', { key: 'access/key', limit: 2 }, null), 401);
    expect((await offLoopback.post('/api/keys/limit', { key: 'access/key', limit: 2 })).status).toBe(200);
  });

  it('regression (issue 21: off loopback the Host check was off): a Host naming another server is refused (403) even with the token; this machine\'s address, a loopback name and an --allowed-host are served', async () => {
    for (const host of ['attacker.example', 'attacker.example:80', 'jobs.example.com.attacker.example', '0.0.0.0']) {
      expect(await statuses(offLoopback, ['/', '/api/keys'], { host, token: TOKEN })).toEqual(all(['/', '/api/keys'], 403));
    }
    const refused = await send(`${offLoopback.url}/api/keys`, { host: 'attacker.example', token: TOKEN });
    expect(JSON.parse(refused.body)).toEqual({ error: expect.stringContaining('--allowed-host') });
    for (const host of [`${reachableAddress()}:7070`, 'localhost', 'JOBS.example.com:443']) {
      expect((await send(`${offLoopback.url}/api/keys`, { host, token: TOKEN })).status).toBe(200);
    }
  });
});

describe('bound off loopback with --public-reads', () => {
  it('reads are served without a token; writes still need it', async () => {
    expect(await statuses(publicReads, [...READS, ...PAGE])).toEqual(all([...READS, ...PAGE], 200));
    await publicReads.refused(() => publicReads.post('/api/keys/limit', { key: 'access/key', limit: 2 }, null), 401);
  });

  it('a Host naming another server is refused (403): making reads public does not turn the Host check off', async () => {
    for (const host of ['attacker.example', 'jobs.example.com']) {
      expect(await statuses(publicReads, ['/', '/api/keys', '/metrics'], { host })).toEqual(all(['/', '/api/keys', '/metrics'], 403));
    }
  });
});

import { spawn, type ChildProcess } from 'node:child_process';
import { get as httpGet } from 'node:http';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { CLI } from '../support/cli.js';
import { reachableAddress } from '../http/support.js';

// `jobledger serve` as a subprocess (the built CLI): binding, the token, and a clean stop.


let db: TestDatabase;
let pool: pg.Pool;
const children: ChildProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
});

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

afterAll(async () => {
  await pool.end();
  await db.drop();
});

interface Served {
  readonly child: ChildProcess;
  readonly url: string;
  stderr(): string;
  /** Sends the signal; resolves to the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

const spawnServe = (args: string[], env: Record<string, string | undefined> = {}) => {
  const child = spawn(process.execPath, [CLI, 'serve', ...args], {
    env: { ...process.env, DATABASE_URL: db.url, LOG_LEVEL: 'warn', JOBLEDGER_TOKEN: undefined, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited, stderr: () => stderr };
};

/** Starts `serve` and waits for its "serving <url>" line. */
const serve = async (args: string[], env: Record<string, string | undefined> = {}): Promise<Served> => {
  const { child, exited, stderr } = spawnServe(['--port', '0', ...args], env);
  const url = await new Promise<string>((resolve, reject) => {
    const check = () => {
      const m = /serving (http:\/\/\S+?)\/? /.exec(stderr());
      if (m) resolve(m[1]!);
    };
    child.stderr!.on('data', check);
    void exited.then((code) => reject(new Error(`serve exited (${code}) before listening:\n${stderr()}`)));
  });
  return {
    child,
    url,
    stderr,
    stop: async (signal = 'SIGTERM') => {
      child.kill(signal);
      return exited;
    },
  };
};

const post = (url: string, body: unknown, token?: string) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) });

/** The status of GET / (no token needed) under another Host header, which fetch does not let a caller set. */
const statusUnderHost = (origin: string, host: string): Promise<number> =>
  new Promise((resolve, reject) => {
    const req = httpGet(`${origin}/`, { headers: { host } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
  });

const tables = async () => (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'`)).rows[0]!.n;

describe('jobledger serve', () => {
  it('refuses a non-loopback --host without JOBLEDGER_TOKEN: exit 2 naming --host, before touching the database', async () => {
    const before = await tables();
    for (const host of ['0.0.0.0', '::', '192.0.2.1']) {
      const { exited, stderr } = spawnServe(['--host', host, '--port', '0']);
      expect(await exited).toBe(2);
      expect(stderr()).toContain('--host');
      expect(stderr()).toContain('JOBLEDGER_TOKEN');
    }
    expect(await tables()).toBe(before);
  });

  it('a port out of range is a usage error naming --port', async () => {
    const { exited, stderr } = spawnServe(['--port', '70000']);
    expect(await exited).toBe(2);
    expect(stderr()).toContain('--port');
  });

  it('without JOBLEDGER_TOKEN: generates a token, prints it once, requires it on mutating routes; SIGTERM stops it with exit 0', async () => {
    const s = await serve([]);
    expect(s.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const token = /the token for this run[^:]*: (\S+)/.exec(s.stderr())?.[1];
    expect(token).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(s.stderr().split(token!).length - 1).toBe(1);
    expect((await fetch(`${s.url}/api/keys`)).status).toBe(200);
    expect((await fetch(`${s.url}/`)).headers.get('content-type')).toContain('text/html');
    expect((await post(`${s.url}/api/jobs`, { name: 'x', key: 'serve/key' })).status).toBe(401);
    expect((await post(`${s.url}/api/jobs`, { name: 'x', key: 'serve/key' }, 'guess')).status).toBe(401);
    const created = await post(`${s.url}/api/jobs`, { name: 'x', key: 'serve/key' }, token);
    expect(created.status).toBe(201);
    const keys = (await (await fetch(`${s.url}/api/keys`)).json()) as { keys: { key: string }[] };
    expect(keys.keys.map((k) => k.key)).toContain('serve/key');
    expect(await s.stop('SIGTERM')).toBe(0);
    expect(s.stderr()).toContain('SIGTERM: stopping');
  });

  it('with JOBLEDGER_TOKEN: uses it, prints no token; SIGINT stops it with exit 0', async () => {
    const s = await serve(['--host', 'localhost'], { JOBLEDGER_TOKEN: 'chosen-token' });
    expect(s.stderr()).not.toContain('token for this run');
    expect(s.stderr()).not.toContain('chosen-token');
    expect((await post(`${s.url}/api/keys/limit`, { key: 'serve/key', limit: 3 }, 'chosen-token')).status).toBe(200);
    expect(await s.stop('SIGINT')).toBe(0);
  });

  it('regression (issue 21: off loopback, reads were open and the Host unchecked): --host 0.0.0.0 with a token: reads need it (/metrics as a Bearer token), the page does not, another Host is refused; --public-reads opens the reads alone', async () => {
    const origin = (url: string) => `http://${reachableAddress()}:${new URL(url).port}`;
    const closed = await serve(['--host', '0.0.0.0', '--allowed-host', 'jobs.example.com'], { JOBLEDGER_TOKEN: 'chosen-token' });
    const at = origin(closed.url);
    const bearer = { authorization: 'Bearer chosen-token' };
    expect((await fetch(`${at}/api/keys`)).status).toBe(401);
    expect((await fetch(`${at}/metrics`)).status).toBe(401);
    expect((await fetch(`${at}/metrics`, { headers: bearer })).status).toBe(200);
    expect((await fetch(`${at}/api/jobs`, { headers: bearer })).status).toBe(200);
    expect((await fetch(`${at}/`)).status).toBe(200);
    expect(await statusUnderHost(at, 'attacker.example')).toBe(403);
    expect(await statusUnderHost(at, 'jobs.example.com')).toBe(200);
    expect(await closed.stop()).toBe(0);

    const open = await serve(['--host', '0.0.0.0', '--public-reads'], { JOBLEDGER_TOKEN: 'chosen-token' });
    expect((await fetch(`${origin(open.url)}/api/keys`)).status).toBe(200);
    expect((await post(`${origin(open.url)}/api/keys/limit`, { key: 'serve/key', limit: 3 })).status).toBe(401);
    expect(await statusUnderHost(origin(open.url), 'attacker.example')).toBe(403);
    expect(await open.stop()).toBe(0);
  });

  it('--async-projections on a database projected inline is refused (both would apply every event twice)', async () => {
    const { exited, stderr } = spawnServe(['--port', '0', '--async-projections'], { JOBLEDGER_TOKEN: 't' });
    expect(await exited).not.toBe(0);
    expect(stderr()).toMatch(/projections are applied inline/);
  });

  it('--async-projections on a fresh database: its own runners apply what its ledger writes (read models, metrics lag back to 0)', async () => {
    // A database projected async from its first ledger on (ledger_settings records it).
    const own = await createTestDatabase();
    const s = await serve(['--async-projections'], { JOBLEDGER_TOKEN: 't', DATABASE_URL: own.url }).catch(async (error: unknown) => {
      await own.drop();
      throw error;
    });
    expect(s.stderr()).toContain('projections async');
    expect((await post(`${s.url}/api/jobs`, { name: 'x', key: 'async/key', limit: 1 }, 't')).status).toBe(201);
    const deadline = Date.now() + 20_000;
    for (;;) {
      const keys = (await (await fetch(`${s.url}/api/keys`)).json()) as { keys: { key: string; inUse: number }[] };
      const metrics = await (await fetch(`${s.url}/metrics`)).text();
      if (keys.keys.some((k) => k.key === 'async/key' && k.inUse === 1) && /jobledger_projection_lag_events\{projection="read_models",mode="async"\} 0\n/.test(metrics)) break;
      if (Date.now() > deadline) throw new Error(`async projections did not catch up:\n${metrics}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(await s.stop()).toBe(0);
    await own.drop();
  });
});

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../support/cli.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

// What the built CLI says when it cannot act: one line on stderr, the flag or variable at fault,
// exit 2 for input (and nothing written), exit 1 for a database it cannot use.

let db: TestDatabase;
let pool: pg.Pool;
let dir: string;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  dir = await mkdtemp(join(tmpdir(), 'jobledger-refusals-'));
  await writeFile(join(dir, 'throws.mjs'), "throw new Error('no API key in this environment');\n");
  await writeFile(join(dir, 'empty.mjs'), 'export default { retries: 3 };\n');
  expect((await jobledger('enqueue', 'work', '--key', 'known', '--job-id', 'r-1')).code).toBe(0);
});

afterAll(async () => {
  await pool.end();
  await db.drop();
  await rm(dir, { recursive: true, force: true });
});

const jobledger = (...args: string[]) => runCli(db.url, args);

const eventCount = async (): Promise<number> => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;

/** A TCP port nothing listens on. */
const closedPort = async (): Promise<number> => {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
};

describe('a mistyped command line is one line with the suggestion, exit 2', () => {
  it.each([
    [['enqeue', 'work'], "error: unknown command 'enqeue' (did you mean enqueue?)\n"],
    [['enqueue', 'work', '--lim', '2'], "error: unknown option '--lim' (did you mean --limit?)\n"],
    [['frobnicate'], "error: unknown command 'frobnicate'\n"],
  ])('%j', async (args, line) => {
    const result = await jobledger(...args);
    expect(result).toEqual({ code: 2, stdout: '', stderr: line });
  });
});

describe('state of a key', () => {
  it('that does not exist is refused like release refuses it: exit 2, one line, nothing written', async () => {
    for (const command of [['state', '--key', 'nosuchkey'], ['release', '--key', 'nosuchkey']]) {
      const before = await eventCount();
      const result = await jobledger(...command);
      expect(result).toEqual({ code: 2, stdout: '', stderr: 'error: key "nosuchkey": unknown (no job was ever enqueued with it)\n' });
      expect(await eventCount()).toBe(before);
    }
  });

  it('at a moment before its first event says so, with when that was (exit 0)', async () => {
    const first = JSON.parse((await jobledger('state', '--key', 'known', '--revision', '0', '--json')).stdout) as { at: string };
    const before = new Date(Date.parse(first.at) - 1).toISOString();
    const human = await jobledger('state', '--key', 'known', '--at', before);
    expect(human).toEqual({ code: 0, stdout: `key "known" had no event yet at ${before}: its first was at ${first.at}\n`, stderr: '' });
    const json = await jobledger('state', '--key', 'known', '--at', before, '--json');
    expect(JSON.parse(json.stdout)).toEqual({ key: 'known', revision: null, at: null, firstEventAt: first.at });
  });
});

describe('worker --handlers that cannot be loaded exits 2 naming the flag, the resolved path and why', () => {
  it.each([
    ['missing.mjs', 'not found'],
    ['throws.mjs', 'threw on import: no API key in this environment'],
    ['empty.mjs', 'exports no handler'],
  ])('%s: %s', async (file, why) => {
    const path = join(dir, file);
    const before = await eventCount();
    const result = await jobledger('worker', '--handlers', path);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/^[^\n]*\n$/);
    expect(result.stderr).toContain(`error: --handlers: ${path}: ${why}`);
    expect(await eventCount()).toBe(before);
  });

  it('a relative path is named as typed and as resolved', async () => {
    const result = await jobledger('worker', '--handlers', './no-such-handlers.mjs');
    expect(result.code).toBe(2);
    expect(result.stderr).toBe(`error: --handlers: ./no-such-handlers.mjs (resolved to ${join(process.cwd(), 'no-such-handlers.mjs')}): not found\n`);
  });
});

describe('a database the CLI cannot use is one line naming DATABASE_URL and what was tried (never the password), exit 1', () => {
  it('a server that is down', async () => {
    const port = await closedPort();
    const result = await runCli(`postgres://jl:s3cret-pw@127.0.0.1:${port}/jobs`, ['keys']);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(new RegExp(`^error: DATABASE_URL: cannot connect to PostgreSQL at 127\\.0\\.0\\.1:${port}/jobs: connect ECONNREFUSED [^\\n]*\\n$`));
    expect(result.stderr).not.toContain('s3cret-pw');
  });

  it('a database that does not exist', async () => {
    const url = new URL(db.url);
    url.pathname = '/jl_no_such_database';
    const result = await runCli(url.toString(), ['enqueue', 'work', '--key', 'k']);
    expect(result).toEqual({ code: 1, stdout: '', stderr: `error: DATABASE_URL: cannot connect to PostgreSQL at ${url.hostname}:${url.port || 5432}/jl_no_such_database: database "jl_no_such_database" does not exist\n` });
  });

  it.each(['not a url', 'postgres://jl:s3cret-pw@[::1/jobs', 'mysql://jl@127.0.0.1/jobs'])('a value that is not a PostgreSQL URL: %s', async (url) => {
    const result = await runCli(url, ['keys']);
    expect(result).toEqual({ code: 1, stdout: '', stderr: 'error: DATABASE_URL: not a PostgreSQL URL (expected postgres://user:password@host:port/database)\n' });
  });
});

describe('--help', () => {
  it('shows durations with their unit', async () => {
    const enqueue = (await jobledger('enqueue', '--help')).stdout.replace(/\s+/g, ' ');
    expect(enqueue).toContain("--lease <duration> lease: how long a worker may stay silent, at least 1s; the key's first enqueue makes it the key's lease too (default: the key's; 30s for a new key)");
    const worker = (await jobledger('worker', '--help')).stdout.replace(/\s+/g, ' ');
    expect(worker).toContain('(default: 10s)');
    expect(worker).not.toMatch(/default: \d{4,}\)/);
  });
});

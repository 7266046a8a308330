import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../support/cli.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

// The built CLI as a subprocess (npm test builds it first), against a test database.

let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
});

afterAll(async () => {
  await pool.end();
  await db.drop();
});

const jobledger = (...args: string[]) => runCli(db.url, args);

const eventCount = async (): Promise<number> => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;

describe('jobledger CLI', () => {
  it('enqueue admits, then parks at the limit; state shows holders and parked, now and as of a past moment', async () => {
    const first = await jobledger('enqueue', 'sendEmail', '--key', 'tenant:acme', '--limit', '1', '--job-id', 'cli-1', '--args', '{"to":"a@example.com"}', '--json');
    expect(first).toMatchObject({ code: 0 });
    expect(JSON.parse(first.stdout)).toEqual({ jobId: 'cli-1', status: 'acquired' });
    const between = new Date().toISOString();
    await new Promise((r) => setTimeout(r, 20));
    const second = await jobledger('enqueue', 'sendEmail', '--key', 'tenant:acme', '--job-id', 'cli-2', '--json');
    expect(JSON.parse(second.stdout)).toEqual({ jobId: 'cli-2', status: 'parked' });

    const now = JSON.parse((await jobledger('state', '--key', 'tenant:acme', '--json')).stdout);
    expect(now).toMatchObject({ key: 'tenant:acme', limit: 1, revision: 4, holders: [{ jobId: 'cli-1', leaseId: 'cli-1:1' }], parked: [{ jobId: 'cli-2' }] });
    const then = JSON.parse((await jobledger('state', '--key', 'tenant:acme', '--at', between, '--json')).stdout);
    expect(then).toMatchObject({ revision: 2, holders: [{ jobId: 'cli-1' }], parked: [] });
    const byRevision = JSON.parse((await jobledger('state', '--key', 'tenant:acme', '--revision', '0', '--json')).stdout);
    expect(byRevision).toMatchObject({ revision: 0, limit: 1, holders: [], parked: [] });

    const human = await jobledger('state', '--key', 'tenant:acme');
    expect(human.stdout).toContain('limit 1, 1 holding, 1 parked, 0 scheduled');
  });

  it.each([
    [['--limit', '0'], '--limit'],
    [['--limit', 'three'], '--limit'],
    [['--lease', '10ms'], '--lease'],
    [['--lease', 'soon'], '--lease'],
    [['--args', '{bad'], '--args'],
    [['--priority', '1.5'], '--priority'],
    [['--run-at', 'tomorrow'], '--run-at'],
    [['--key', ''], '--key'],
    [['--args', '{"to":"a\\u0000b"}'], '--args (args.to): must not contain a NUL'],
    [['--args', '{"\\ud800":1}'], '--args: has a property name with a lone UTF-16 surrogate'],
    [['--args', '['.repeat(100) + ']'.repeat(100)], 'is nested more than 64 deep'],
    [['--delay', ''], '--delay'],
    [['--when-full', 'drop'], '--when-full'],
  ])('bad input %j exits 2, names %s, and writes nothing', async (flags, named) => {
    await jobledger('migrate');
    const before = await eventCount();
    const result = await jobledger('enqueue', 'work', '--key', 'bad-cli', ...flags);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(named);
    expect(await eventCount()).toBe(before);
  });

  it('--when-full reject on a full key prints "rejected"; a limit other than the key\'s exits 2 naming it and writes nothing', async () => {
    await jobledger('enqueue', 'work', '--key', 'cli-full', '--limit', '1', '--job-id', 'cf-1');
    const rejected = await jobledger('enqueue', 'work', '--key', 'cli-full', '--job-id', 'cf-2', '--when-full', 'reject');
    expect(rejected.code, rejected.stderr).toBe(0);
    expect(rejected.stdout).toBe('cf-2 rejected\n');
    const before = await eventCount();
    const conflict = await jobledger('enqueue', 'work', '--key', 'cli-full', '--limit', '3', '--job-id', 'cf-3');
    expect(conflict.code).toBe(2);
    expect(conflict.stderr).toContain('"cli-full" has limit 1, not 3');
    expect(await eventCount()).toBe(before);
  });

  it('an unknown command or a missing argument is a usage error', async () => {
    expect((await jobledger('frobnicate')).code).toBe(2);
    expect((await jobledger('enqueue')).code).toBe(2);
    expect((await jobledger('state')).code).toBe(2);
  });

  it('state checks its key like every other command: an empty one exits 2 naming --key, with one line and no stack trace', async () => {
    const result = await jobledger('state', '--key', '');
    expect(result.code).toBe(2);
    expect(result.stderr).toBe('error: --key: must be a non-empty string of at most 500 characters\n');
  });
});

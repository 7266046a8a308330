import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH } from '../../src/domain/values.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { STACK_FRAME, runCliInProcess } from './in-process.js';

// Bad input on the command line — a NUL, a lone surrogate, JSON nested thousands deep, an empty
// or out-of-range value — exits 2 with one line naming the flag, and writes nothing. In process,
// so arguments a real process cannot be given (NUL, lone surrogates) are tried too.

let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  expect((await jobledger('enqueue', 'seed', '--key', 'k', '--job-id', 'seed-1')).code).toBe(0);
});

afterAll(async () => {
  await pool.end();
  await db.drop();
});

const jobledger = (...args: string[]) => runCliInProcess(db.url, args);

const eventCount = async (): Promise<number> => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;

const NUL = 'a\u0000b';
const LONE = 'a\ud800b';

/** A test title: the command line, cut short (one is 20,000 characters of JSON). */
const titled = (cases: readonly (readonly [string[], string])[]) => cases.map(([args, named]) => [`${JSON.stringify(args).slice(0, 100)} names ${named}`, args, named] as const);

describe('bad input exits 2 with one line naming the flag, and writes nothing', () => {
  it.each(titled([
    [['enqueue', NUL], '<name>'],
    [['enqueue', LONE], '<name>'],
    [['enqueue', 'x', '--key', NUL], '--key'],
    [['enqueue', 'x', '--key', LONE], '--key'],
    [['enqueue', 'x', '--job-id', NUL], '--job-id'],
    [['enqueue', 'x', '--args', '{"a":{"b":"\\u0000"}}'], '--args (args.a.b): must not contain a NUL'],
    [['enqueue', 'x', '--args', '{"a":{"\\u0000":1}}'], '--args (args.a): has a property name with a NUL'],
    [['enqueue', 'x', '--args', '["ok","\\ud800"]'], '--args (args[1]): must not contain a lone UTF-16 surrogate'],
    [['enqueue', 'x', '--args', '['.repeat(10_000) + ']'.repeat(10_000)], `is nested more than ${MAX_JSON_DEPTH} deep`],
    [['enqueue', 'x', '--delay', ''], '--delay'],
    [['enqueue', 'x', '--lease', ''], '--lease'],
    [['enqueue', 'x', '--priority', '99999999999999999999'], '--priority'],
    [['state', '--key', NUL], '--key: must not contain a NUL'],
    [['state', '--key', LONE], '--key: must not contain a lone UTF-16 surrogate'],
    [['state', '--key', ''], '--key: must be a non-empty string'],
    [['state', '--key', 'k', '--revision', '99999999999999999999'], '--revision'],
    [['release', '--key', NUL], '--key'],
    [['release', '--key', 'k', '--job', LONE], '--job'],
    [['release', '--key', 'k', '--by', NUL], '--by'],
    [['discard', '--key', 'k', '--job', 'ok', '--job', NUL], '--job (jobIds[1])'],
    [['set-limit', '--key', LONE, '--limit', '2'], '--key'],
    [['set-limit', '--key', 'k', '--limit', '99999999999999999999'], '--limit'],
    [['cancel', '--job', NUL], '--job'],
    [['cancel', '--job', 'seed-1', '--by', LONE], '--by'],
    [['audit', '--key', NUL], '--key'],
    [['audit', '--job', LONE], '--job'],
    [['jobs', '--key', NUL], '--key'],
    [['jobs', '--status', NUL], '--status'],
    [['jobs', '--name', NUL], '--name'],
    [['jobs', '--queue', NUL], '--queue'],
  ]))('%s', async (_title, args, named) => {
    const before = await eventCount();
    const result = await jobledger(...args);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain(named);
    expect(result.stderr).toMatch(/^error: [^\n]*\n$/);
    expect(result.stdout).toBe('');
    expect(await eventCount()).toBe(before);
  });

  it('an error quoting a value with a newline or a NUL is still one line', async () => {
    const result = await jobledger('enqueue', 'x', '--delay', '5\nm\u0000');
    expect(result.code).toBe(2);
    expect(result.stderr).toBe('error: --delay: "5\\nm\\u0000" is not a duration (examples: 1500, 30s, 5m, 2h)\n');
  });

  it('regression (issue 21: a crafted cursor failed in PostgreSQL, exit 1): jobs --cursor of [1e300,"x"] exits 2 naming --cursor', async () => {
    const result = await jobledger('jobs', '--cursor', Buffer.from('[1e300,"x"]').toString('base64url'));
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toBe('error: --cursor: is not a cursor this listing returned\n');
  });

  it('state of a key with U+FFFD is not the key with a lone surrogate there', async () => {
    expect((await jobledger('enqueue', 'x', '--key', 'tenant\ufffd', '--limit', '3')).code).toBe(0);
    const state = await jobledger('state', '--key', 'tenant\ufffd', '--json');
    expect(JSON.parse(state.stdout)).toMatchObject({ key: 'tenant\ufffd', limit: 3 });
    const lone = await jobledger('state', '--key', 'tenant\udc00', '--json');
    expect(lone.code).toBe(2);
    expect(lone.stderr).not.toMatch(STACK_FRAME);
  });
});

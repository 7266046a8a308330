import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { duration, integer } from '../../src/adapters/cli/parse.js';
import { JobId, Key, QueueName } from '../../src/domain/values.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { runCliWith, type CliResult } from '../support/cli.js';

// Regression (issue 21: `jobledger worker --queue "a/b"` printed its error and never exited): a
// seeded sample of wrong command lines of every command, each run as a real process of the built
// CLI (many at a time), must exit 2 on its own, and together write nothing to the database. Each
// line is valid but for one or two wrong parts: a name with '/', an odd string, a negative or
// out-of-range number, an unknown flag, a stray argument, a job or key that does not exist. A
// process still running after HANG_MS is killed and named. A failure prints the seed.

const SEED = 20_261_221;
/** Random command lines per command (21 commands); see sample(). */
const PER_COMMAND = 2;
/** Processes at once. */
const PARALLEL = 4;
/** Generous: a refusal takes well under a second; a process still running then has hung. */
const HANG_MS = 20_000;

const HANDLERS = new URL('../fixtures/noop-handlers.mjs', import.meta.url).pathname;

let db: TestDatabase;
let pool: pg.Pool;

const env = () => ({
  DATABASE_URL: db.url,
  LOG_LEVEL: 'warn',
  // None of these may make a wrong line right (serve off loopback needs a token; queue caps).
  JOBLEDGER_TOKEN: undefined,
  JOBLEDGER_TOKENS: undefined,
  JOBLEDGER_TOKENS_FILE: undefined,
  JOBLEDGER_QUEUES: undefined,
});

beforeAll(async () => {
  db = await createTestDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  // A migrated database with a key k holding job j1, so that known and unknown keys and jobs differ.
  const seeded = await runCliWith(env(), ['enqueue', 'send', '--key', 'k', '--limit', '1', '--job-id', 'j1']);
  expect(seeded.code, seeded.stderr).toBe(0);
});

afterAll(async () => {
  await pool.end();
  await db.drop();
});

/** Every row of every table, as one digest per table: what "nothing was written" compares. */
const contents = async (): Promise<Record<string, string>> => {
  const { rows: tables } = await pool.query<{ name: string }>(`SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`);
  const digests = await Promise.all(
    tables.map(async ({ name }) => {
      const t = pg.escapeIdentifier(name);
      const { rows } = await pool.query<{ digest: string }>(`SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) AS digest FROM ${t} t`);
      return [name, rows[0]!.digest] as const;
    }),
  );
  return Object.fromEntries(digests);
};

const throws = (f: () => unknown): boolean => {
  try {
    f();
    return false;
  } catch {
    return true;
  }
};

/** Odd text a process can be given (argv is UTF-8 without NUL: no NUL, no lone surrogate). */
const odd = fc
  .oneof(
    fc.constantFrom('', ' ', '-', '--', '=', '/', 'a/b', '../..', '%00', '\n', '"', '\\', '{', '1e400', '-0', 'NaN', '٣', '🔑', '\ufffd', 'x'.repeat(600)),
    fc.string({ unit: 'grapheme', maxLength: 8 }),
  )
  .map((s) => s.replaceAll('\u0000', ''));

/** A flag with a wrong value: `known` ones, and odd text `isWrong` (when given) says is wrong. */
const flag = (name: string, known: readonly string[], isWrong?: (value: string) => boolean) =>
  (isWrong === undefined ? fc.constantFrom(...known) : fc.oneof(fc.constantFrom(...known), odd.filter(isWrong))).map((value) => [name, value]);

/** An integer flag: outside [min, max], or no integer at all. */
const badInteger = (name: string, min: number, max = Number.MAX_SAFE_INTEGER) =>
  fc
    .oneof(
      fc.integer({ min: min - 1_000_000, max: min - 1 }).map(String),
      ...(max < Number.MAX_SAFE_INTEGER ? [fc.integer({ min: max + 1, max: max + 1_000_000 }).map(String)] : []),
      fc.constantFrom('1.5', '1e3', '0x10', '99999999999999999999', '-99999999999999999999', 'two'),
      odd.filter((v) => throws(() => integer(name)(v))),
    )
    .map((value) => [name, value]);

/** A duration flag: no duration, or longer than `maxMs`. */
const badDuration = (name: string, known: readonly string[] = [], maxMs?: number) =>
  flag(name, ['-5m', '5 parsecs', '1e400y', 'soon', ...known], (v) => throws(() => duration(name, maxMs)(v)));

const badQueue = (name = '--queue') => flag(name, ['a/b', '', '.hidden', '-x', 'q'.repeat(64), 'has space'], (v) => !QueueName.is(v));
const badKey = (name = '--key') => flag(name, ['', ' ', 'k'.repeat(501)], (v) => !Key.is(v));
const badId = (name: string) => flag(name, ['', ' ', 'j'.repeat(201)], (v) => !JobId.is(v));
const badBy = flag('--by', ['', ' ', 'b'.repeat(201)]);
const badIso = (name: string) => flag(name, ['tomorrow', '2030-13-45', 'yesterday at noon'], (v) => Number.isNaN(Date.parse(v)));
const unknownKey = fc.constantFrom('no-such-key', 'ghost/1').map((k) => ['--key', k]);
const unknownJob = fc.constantFrom('no-such-job', 'ghost/j').map((j) => ['--job', j]);

/** Wrong in any command: an unknown flag, a stray argument. */
const anywhere = [fc.constantFrom<string[]>(['--bogus'], ['--bogus', 'x'], ['--no-such-flag=1'], ['-Z']), fc.constantFrom<string[]>(['stray'], ['a/b'])];

interface Spec {
  /** Runs until signalled when its line is right (worker, serve): a refusal that leaks hangs it. */
  readonly longRunning?: boolean;
  /** What the line starts with: arguments, required flags (valid). */
  readonly base?: readonly string[];
  /** Valid flags a line may also carry. */
  readonly valid?: readonly (readonly string[])[];
  /** The wrong parts; a line has one or two of them (or of `anywhere`). */
  readonly wrong: readonly fc.Arbitrary<string[]>[];
}

const by = ['--by', 'alice'];

const COMMANDS: Record<string, Spec> = {
  migrate: { valid: [['--json']], wrong: [] },
  enqueue: {
    base: ['send'],
    valid: [['--key', 'k2'], ['--json'], ['--priority', '-1'], ['--delay', '5m']],
    wrong: [
      badQueue(),
      badQueue('--queue-cap').map(([f, q]) => [f!, `${q}=1`]),
      badInteger('--limit', 1, 100_000),
      badDuration('--lease', ['0', '999', '25h']),
      badInteger('--priority', -(2 ** 31), 2 ** 31),
      badIso('--run-at'),
      badDuration('--delay'),
      badInteger('--max-attempts', 1, 1_000),
      flag('--when-full', ['bogus', '', 'PARK']),
      flag('--args', ['{', '{"a":', "{'a':1}", 'undefined']),
      badKey(),
      badId('--job-id'),
      badKey('--limit-key').filter(([, k]) => k === ''),
    ],
  },
  worker: {
    longRunning: true,
    base: ['--handlers', HANDLERS],
    valid: [['--sweeper'], ['--concurrency', '2'], ['--visibility', '30s']],
    wrong: [
      badQueue(),
      badInteger('--concurrency', 1),
      badDuration('--grace', ['2d'], 86_400_000),
      badDuration('--visibility', ['99999999999999999999'], 86_400_000),
      badDuration('--handoff-slice', ['25h'], 86_400_000),
      badDuration('--unknown-job-delay', ['0']),
      flag('--unknown-jobs', ['retry', '', 'FAIL']),
      flag('--handlers', ['/no/such/handlers.mjs', '', '.']),
      badQueue('--queue-cap').map(([f, q]) => [f!, `${q}=1`]),
      flag('--queue-cap', ['q=0', 'q=-1', 'q', '=3']),
    ],
  },
  serve: {
    longRunning: true,
    valid: [['--port', '0']],
    wrong: [
      badInteger('--port', 0, 65_535),
      flag('--host', ['a/b', '0.0.0.0', '::', '192.0.2.1', 'has space', '10.0.0.1:7070', '']),
      flag('--allowed-host', ['http://x', 'a/b', '', 'x:80']),
      flag('--queue-cap', ['a/b=1', 'q=0', 'q']),
    ],
  },
  keys: { valid: [['--json']], wrong: [] },
  workers: { valid: [['--all'], ['--json']], wrong: [] },
  jobs: {
    valid: [['--key', 'k'], ['--json'], ['--status', 'holding']],
    wrong: [badInteger('--limit', 1, 1_000), flag('--status', ['sleeping', '', 'Dead']), badKey(), badQueue(), flag('--name', ['', ' ']), flag('--cursor', ['nope', Buffer.from('[1e300,"x"]').toString('base64url'), ''])],
  },
  audit: { valid: [['--json'], ['--events']], wrong: [badKey(), badId('--job'), unknownKey, unknownJob] },
  state: { base: ['--key', 'k'], valid: [['--json']], wrong: [badKey(), unknownKey, badInteger('--revision', 0), badIso('--at'), fc.constant(['--at', '2030-01-01T00:00:00Z', '--revision', '1'])] },
  release: { base: ['--key', 'k'], valid: [by, ['--json']], wrong: [badKey(), unknownKey, badId('--job'), badBy] },
  discard: { base: ['--key', 'k'], valid: [by, ['--job', 'j1']], wrong: [badKey(), unknownKey, badId('--job'), badBy] },
  'set-limit': { base: ['--key', 'k', '--limit', '2'], valid: [by, ['--json']], wrong: [badKey(), badInteger('--limit', 1, 100_000), badBy] },
  pause: { base: ['--key', 'k'], valid: [by, ['--reason', 'deploy']], wrong: [badKey(), unknownKey, badBy, fc.constant(['--reason', 'r'.repeat(501)])] },
  // k is not paused: resuming it is refused, with no further wrong part (the empty one).
  resume: { base: ['--key', 'k'], valid: [by], wrong: [badKey(), unknownKey, badBy, fc.constant([])] },
  cancel: { base: ['--job', 'j1'], valid: [by, ['--json']], wrong: [badId('--job'), unknownJob, badBy] },
  retry: { valid: [by], wrong: [badId('--job'), unknownJob, fc.constant(['--job', 'j1']), fc.constant(['--key', 'k']), fc.constant(['--key', 'k', '--job', 'j1', '--dead'])] },
  explain: { base: ['--job', 'j1'], valid: [['--json']], wrong: [badId('--job'), unknownJob, badIso('--at')] },
  job: { base: ['--job', 'j1'], valid: [['--json']], wrong: [badId('--job'), unknownJob] },
  archive: { base: ['--before', '30d'], valid: [['--dry-run'], ['--json']], wrong: [flag('--before', ['2999-01-01T00:00:00Z', 'soon', '-5d', '99999999999999999999', ''])] },
  replay: { valid: [['--verify'], ['--json']], wrong: [flag('--projection', ['nope', 'dispatcher', ''])] },
  demo: { valid: [['--force'], ['--json']], wrong: [badInteger('--jobs', 1, 2_000)] },
};

/** A line of the command with `wrong` among random valid flags. */
const lineWith = (name: string, spec: Spec, wrong: fc.Arbitrary<string[][]>): fc.Arbitrary<string[]> =>
  fc
    .tuple(fc.subarray([...(spec.valid ?? [])], { maxLength: Math.min(2, spec.valid?.length ?? 0) }), wrong)
    .map(([valid, parts]) => [name, ...(spec.base ?? []), ...valid.flat(), ...parts.flat()]);

/** One or two wrong parts of any kind; most are the command's own. */
const someWrong = (spec: Spec): fc.Arbitrary<string[][]> =>
  fc.array(fc.oneof(...(spec.wrong.length > 0 ? [{ weight: 3, arbitrary: fc.oneof(...spec.wrong) }] : []), { weight: 1, arbitrary: fc.oneof(...anywhere) }), { minLength: 1, maxLength: 2 });

/**
 * The sample: PER_COMMAND lines of each command; a long-running one also a line for each of its
 * wrong parts alone (a second one, or an unknown flag, would be refused before its action runs).
 */
const sample = (): string[][] =>
  Object.entries(COMMANDS).flatMap(([name, spec], i) => {
    const seed = SEED + 100 * i;
    const each = spec.longRunning === true ? spec.wrong.map((wrong, j) => fc.sample(lineWith(name, spec, wrong.map((part) => [part])), { seed: seed + j + 1, numRuns: 1 })[0]!) : [];
    return [...fc.sample(lineWith(name, spec, someWrong(spec)), { seed, numRuns: PER_COMMAND }), ...each];
  });

/** Runs `run` over `items`, `limit` at a time. */
const inParallel = async <A, B>(items: readonly A[], limit: number, run: (item: A) => Promise<B>): Promise<B[]> => {
  const results: B[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: limit }, async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await run(items[i]!);
      }
    }),
  );
  return results;
};

describe('wrong command lines, as processes', () => {
  it('regression (issue 21): worker --queue "a/b" exits 2 at once, naming --queue, and announces no worker', async () => {
    const result = await runCliWith(env(), ['worker', '--handlers', HANDLERS, '--queue', 'a/b'], HANG_MS);
    expect(result.killed ?? false, 'the worker hung').toBe(false);
    expect(result.code).toBe(2);
    expect(result.stderr).toBe('error: --queue: must be 1-63 letters, digits, "_", "." or "-"\n');
    expect((await pool.query('SELECT id FROM workers')).rows).toEqual([]);
  });

  it(`regression (issue 21: a refused worker never exited): wrong lines of each of ${Object.keys(COMMANDS).length} commands (seed ${SEED}) each exit 2 at once, and write nothing`, async () => {
    const lines = sample();
    const before = await contents();
    const started = Date.now();
    const results = await inParallel(lines, PARALLEL, async (args): Promise<{ args: string[] } & CliResult> => ({ args, ...(await runCliWith(env(), args, HANG_MS)) }));
    const seconds = (Date.now() - started) / 1000;
    console.log(`${lines.length} wrong command lines (seed ${SEED}) ran in ${seconds.toFixed(1)} s, ${PARALLEL} at a time`);
    const wrong = results
      .filter((r) => r.killed === true || r.code !== 2)
      .map((r) => `${JSON.stringify(r.args).slice(0, 300)}: ${r.killed === true ? `HUNG (killed after ${HANG_MS} ms)` : `exit ${r.code}`}; stderr: ${r.stderr.trim().slice(0, 300)}`);
    expect(wrong, `seed ${SEED}: ${wrong.length} of ${lines.length} lines did not exit 2 on their own`).toEqual([]);
    // Each said why, in one line of its own or commander's.
    for (const r of results) expect(r.stderr, JSON.stringify(r.args)).toMatch(/^error: /);
    expect(await contents(), `seed ${SEED}: a refused line wrote to the database`).toEqual(before);
  }, 120_000);
});

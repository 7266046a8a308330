import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { manualClock, randomRun } from '../projections/support.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { expectRefused, runCli } from '../support/cli.js';

// `jobledger archive --before` as a subprocess (the built CLI) after a random workload a month
// ago: it moves the events of the jobs finished before the cut out of the live table and says how
// much; `state --at` (before and after the cut), `audit` and `replay --verify` answer as before.

const DAY = 86_400_000;
const KEYS = ['av:a', 'av:b'];

let db: MigratedDatabase;
let ledger: Ledger;
const start = Date.now() - 30 * DAY;
const clock = manualClock(start);
let cut: string;

beforeAll(async () => {
  db = await createMigratedDatabase(4);
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: clock.now, logger: silentLogger });
  await randomRun(ledger, clock, { seed: 12, steps: 160, keys: KEYS, prefix: 'av' });
  await ledger.close();
  cut = new Date(start + (clock.now() - start) / 2).toISOString();
});

afterAll(async () => {
  await db.drop();
});

const jobledger = (...args: string[]) => runCli(db.url, args);
const count = async (table: string): Promise<number> => (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]!.n;

/** What the CLI answers about history: each key's state at moments around the cut, its audit, and the verify. */
const answers = async () => {
  const moments = [start + 60_000, Date.parse(cut) - 1, clock.now()].map((t) => new Date(t).toISOString());
  const out: string[] = [];
  for (const key of KEYS) {
    for (const at of moments) out.push((await jobledger('state', '--key', key, '--at', at, '--json')).stdout);
    out.push((await jobledger('audit', '--key', key, '--json')).stdout);
  }
  const verified = await jobledger('replay', '--verify', '--json');
  expect(verified.code, verified.stderr).toBe(0);
  return { out, verified: JSON.parse(verified.stdout).projections.map((p: { differences: unknown[] }) => p.differences) };
};

describe('jobledger archive', () => {
  it('refuses a --before it cannot use, naming the flag, and moves nothing', async () => {
    await expectRefused(jobledger, () => count('events_archive'), ['archive', '--before', 'last tuesday'], '--before');
    await expectRefused(jobledger, () => count('events_archive'), ['archive', '--before', new Date(Date.now() + DAY).toISOString()], '--before');
    expect(await count('events_archive')).toBe(0);
  });

  // The workload ran a month ago on the ledger's clock, but its rows were all written this week:
  // whole weeks move nothing here (test/adapters/postgres/archive-weeks.int.test.ts), --exact moves them row by row.
  it('with --exact moves the events of jobs finished before the cut, says how much, and history reads the same', async () => {
    const before = await answers();
    const live = await count('events');

    const whole = JSON.parse((await jobledger('archive', '--before', cut, '--dry-run', '--json')).stdout);
    expect(whole).toMatchObject({ events: 0, weeks: [], exact: false });
    const dry = await jobledger('archive', '--before', cut, '--exact', '--dry-run', '--json');
    expect(dry.code, dry.stderr).toBe(0);
    const wouldMove = JSON.parse(dry.stdout);
    expect(wouldMove.events).toBeGreaterThan(0);
    expect(await count('events')).toBe(live);

    const moved = await jobledger('archive', '--before', cut, '--exact');
    expect(moved.code, moved.stderr).toBe(0);
    expect(moved.stdout).toMatch(new RegExp(`^moved ${wouldMove.events} events of ${wouldMove.jobs} jobs finished before ${cut} \\([\\d.]+ MB, ${wouldMove.streams} streams; no whole week, the rest row by row\\) to events_archive; ${live - wouldMove.events} events stay live\\n$`));
    expect(await count('events')).toBe(live - wouldMove.events);
    expect(await count('events_archive')).toBe(wouldMove.events);

    expect(await answers()).toEqual(before);
    expect(before.verified.flat()).toEqual([]);

    // Once is enough: a second run finds nothing more before the same cut.
    expect(JSON.parse((await jobledger('archive', '--before', cut, '--exact', '--json')).stdout)).toMatchObject({ events: 0, jobs: 0 });
  });
});

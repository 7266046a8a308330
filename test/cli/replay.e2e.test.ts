import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { manualClock, randomRun } from '../projections/support.js';
import { CLI, runCli } from '../support/cli.js';
import { silentLogger } from '../../src/domain/ports/logger.js';

// `jobledger replay` as a subprocess (the built CLI) on a database after a workload.

const run = promisify(execFile);

let db: MigratedDatabase;
let ledger: Ledger;
const clock = manualClock();

beforeAll(async () => {
  db = await createMigratedDatabase(4);
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: clock.now, logger: silentLogger });
  await randomRun(ledger, clock, { seed: 11, steps: 300, keys: ['rp:a', 'rp:b', 'rp:c', 'rp:d'], prefix: 'rp' });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

const jobledger = (...args: string[]) => runCli(db.url, args);

/** Everything replay may touch: the read models (the jobs' rows, their dispatch messages among them) and the ledger. */
const snapshot = async () => {
  const out: Record<string, unknown[]> = {};
  for (const [table, order] of [
    ['jl_jobs', 'job_id'],
    ['jl_slots', 'job_id'],
    ['jl_parked', 'job_id'],
    ['jl_keys', 'stream'],
    ['events', 'global_position'],
  ]) out[table!] = (await db.pool.query(`SELECT * FROM ${table} ORDER BY ${order}`)).rows;
  return out;
};

describe('jobledger replay', () => {
  it('rebuilds the read models from the ledger: the same rows as the live projection, a summary without a terminal', async () => {
    const before = await snapshot();
    const total = before.events!.length;
    const replayed = await jobledger('replay');
    expect(replayed.code).toBe(0);
    expect(replayed.stdout).toMatch(new RegExp(`^read_models: rebuilt from ${total} events in [\\d.]+ s \\(\\d+ events/s\\); rows: jl_keys ${before.jl_keys!.length}, jl_jobs ${before.jl_jobs!.length}, `));
    expect(replayed.stderr).toBe(''); // no terminal: no progress bar escape codes
    expect(await snapshot()).toEqual(before);

    const json = JSON.parse((await jobledger('replay', '--projection', 'read_models', '--json')).stdout);
    expect(json).toMatchObject({ projections: [{ projection: 'read_models', verified: false, events: total, rows: { jl_jobs: before.jl_jobs!.length } }] });
    expect(await snapshot()).toEqual(before);
  });

  it('on a terminal, shows a progress bar with events/s and ETA (under script(1), which gives it a pseudo-terminal)', async () => {
    const total = (await snapshot()).events!.length;
    const { stdout } = await run('script', ['-qec', `${process.execPath} ${CLI} replay`, '/dev/null'], { env: { ...process.env, DATABASE_URL: db.url, LOG_LEVEL: 'warn' } });
    expect(stdout).toMatch(new RegExp(`replaying read_models \\[.*\\] 100% \\| ${total}/${total} events \\| \\d+ events/s \\| ETA`));
    expect(stdout).toContain(`read_models: rebuilt from ${total} events`);
  });

  it('--verify passes on a clean database, then names the table and row of each tampered read-model row and exits 1; replay repairs them', async () => {
    const clean = await jobledger('replay', '--verify');
    expect(clean).toMatchObject({ code: 0 });
    expect(clean.stdout).toContain('no differences');

    const job = (await db.pool.query<{ job_id: string; status: string }>(`SELECT job_id, status FROM jl_jobs WHERE status <> 'dead' ORDER BY job_id LIMIT 1`)).rows[0]!;
    const parked = (await db.pool.query<{ job_id: string }>(`SELECT job_id FROM jl_parked ORDER BY job_id LIMIT 1`)).rows[0]!;
    await db.pool.query(`UPDATE jl_jobs SET status = 'dead' WHERE job_id = $1`, [job.job_id]);
    // A parked job's row gone (jl_parked is a view of jl_jobs).
    await db.pool.query(`DELETE FROM jl_jobs WHERE job_id = $1`, [parked.job_id]);
    const tampered = await snapshot();

    const human = await jobledger('replay', '--verify');
    expect(human.code).toBe(1);
    expect(human.stdout).toContain('2 rows differ');
    expect(human.stdout).toMatch(new RegExp(`jl_jobs\\s*│\\s*job_id=${job.job_id}\\s*│\\s*changed: status "dead" \\(ledger: "${job.status}"\\)`));
    expect(human.stdout).toMatch(new RegExp(`jl_jobs\\s*│\\s*job_id=${parked.job_id}\\s*│\\s*missing`));
    expect(human.stderr).toContain('read_models: 2 rows differ from the ledger');

    const json = await jobledger('replay', '--verify', '--json');
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout).projections[0].differences).toEqual([
      { table: 'jl_jobs', key: { job_id: job.job_id }, kind: 'changed', columns: [{ column: 'status', live: 'dead', ledger: job.status }] },
      { table: 'jl_jobs', key: { job_id: parked.job_id }, kind: 'missing', columns: [] },
    ]);
    expect(await snapshot()).toEqual(tampered); // verify wrote nothing

    expect((await jobledger('replay')).code).toBe(0);
    expect(await jobledger('replay', '--verify')).toMatchObject({ code: 0 });
    expect((await db.pool.query(`SELECT status FROM jl_jobs WHERE job_id = $1`, [job.job_id])).rows).toEqual([{ status: job.status }]);
  });

  it.each([
    [['--projection', 'dispatcher'], /--projection: projection dispatcher cannot be rebuilt.*notifications/],
    [['--projection', 'dispatcher', '--verify'], /--projection: projection dispatcher cannot be rebuilt/],
    [['--projection', 'nope'], /--projection: unknown projection "nope" \(rebuildable: read_models\)/],
  ])('%j is refused with exit 2 and changes nothing', async (flags, message) => {
    const before = await snapshot();
    const refused = await jobledger('replay', ...flags);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(message);
    expect(refused.stdout).toBe('');
    expect(await snapshot()).toEqual(before);
  });
});

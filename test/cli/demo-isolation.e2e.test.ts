import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEMO_KEY_PREFIX, DEMO_QUEUE, MAX_DEMO_JOBS } from '../../src/adapters/cli/commands/demo.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { runCli } from '../support/cli.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// `jobledger demo` on a database that already holds other people's jobs: refused unless --force,
// and with --force it runs on its own queue and keys and leaves every other job as it found it.

let db: MigratedDatabase;
let ledger: Ledger;

beforeAll(async () => {
  db = await createMigratedDatabase(4, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

const demo = (...args: string[]) => runCli(db.url, ['demo', ...args]);

const eventCount = async (): Promise<number> => (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;

/** Everything of the jobs that are not the demo's: their events and their jl_* rows (their dispatch messages among them). */
const foreignSnapshot = async () => {
  const rows = async (sql: string, value: string) => (await db.pool.query(sql, [value])).rows;
  const demoStreams = `key:${DEMO_KEY_PREFIX}%`;
  return {
    events: await rows('SELECT global_position, stream, stream_revision, type, data, event_id FROM events WHERE stream NOT LIKE $1 ORDER BY global_position', demoStreams),
    jobs: await rows('SELECT * FROM jl_jobs WHERE stream NOT LIKE $1 ORDER BY job_id', demoStreams),
    slots: await rows('SELECT * FROM jl_slots WHERE stream NOT LIKE $1 ORDER BY job_id', demoStreams),
    parked: await rows('SELECT * FROM jl_parked WHERE stream NOT LIKE $1 ORDER BY job_id', demoStreams),
    // A claim row-locks a job's row (xmax): the demo's workers claimed none of these.
    claimed: await rows(`SELECT job_id, xmax::text FROM jl_jobs WHERE queue <> $1 ORDER BY job_id`, DEMO_QUEUE),
  };
};

describe('jobledger demo beside other jobs', () => {
  it('refuses a database holding jobs that are not its own; with --force it runs on its own queue and keys and leaves them untouched', async () => {
    // Foreign jobs of every kind the demo's workers or a sweeper could touch: admitted (a message
    // on `default`), parked, on another queue, without a key, scheduled far ahead, due soon (a
    // sweeper would admit it), and started by a worker gone silent (a sweeper would expire it).
    await ledger.enqueueMany([
      { name: 'buildReport', key: 'report:nightly', limit: 1, jobId: 'report-mon' },
      { name: 'buildReport', key: 'report:nightly', jobId: 'report-tue' },
      { name: 'sendEmail', key: 'smtp', limit: 5, queue: 'mail', jobId: 'mail-1' },
      { name: 'work', jobId: 'keyless-1' },
      { name: 'work', key: 'later', delayMs: 3_600_000, jobId: 'later-1' },
      { name: 'work', key: 'due-soon', delayMs: 300, jobId: 'due-1' },
      { name: 'work', key: 'silent', limit: 1, leaseMs: 1_000, jobId: 'silent-1' },
    ]);
    const lease = (await ledger.keyState('silent')).state.jobs['silent-1']!.lease!.leaseId;
    await ledger.execute(keyStream('silent'), { type: 'Start', jobId: 'silent-1', leaseId: lease, workerId: 'gone' });
    const before = await foreignSnapshot();

    const refused = await demo('--jobs', '40');
    expect(refused.code, refused.stderr).toBe(2);
    const message = refused.stderr.trim().split('\n');
    expect(message).toHaveLength(1);
    expect(message[0]).toMatch(/^error: demo: this database holds 7 unfinished jobs that are not the demo's \(6 on queue default, 1 on queue mail\); .*pass --force/);
    expect(await foreignSnapshot()).toEqual(before);

    const forced = await demo('--jobs', '40', '--force', '--json');
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stderr).toContain("demo: --force: this database holds 7 unfinished jobs that are not the demo's");
    const result = JSON.parse(forced.stdout) as { keys: { key: string; jobs: number }[]; crashed: { reason: string }[] };
    expect(result.keys.reduce((n, k) => n + k.jobs, 0)).toBe(41);
    expect(result.keys.every((k) => k.key.startsWith(DEMO_KEY_PREFIX))).toBe(true);
    expect(result.crashed.map((h) => h.reason)).toEqual(['expired', 'completed']);
    // the silent lease expired and the due job came due during the run: nobody swept them
    expect(await foreignSnapshot()).toEqual(before);
    const demoJobs = await db.pool.query<{ queue: string; key: string }>(`SELECT DISTINCT queue, key FROM jl_jobs WHERE stream LIKE 'key:${DEMO_KEY_PREFIX}%'`);
    expect(new Set(demoJobs.rows.map((r) => r.queue))).toEqual(new Set([DEMO_QUEUE]));
  }, 120_000);

  it.each([['-100'], ['0'], ['1.5'], ['ten'], [String(MAX_DEMO_JOBS + 1)], ['99999999999999999999']])('refuses --jobs %s (exit 2, the flag named, nothing written)', async (jobs) => {
    const before = await eventCount();
    const result = await demo('--jobs', jobs, '--force');
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toMatch(/^error: --jobs: /);
    expect(await eventCount()).toBe(before);
  });
});

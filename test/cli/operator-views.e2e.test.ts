import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import type { Worker } from '../../src/adapters/worker/worker.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { expectRefused, runCli } from '../support/cli.js';
import { until } from '../support/until.js';

// The operator's commands of issue 12 as the built CLI runs them (one process each), on a key
// with a running holder, a parked job and a dead job, and a worker announcing itself:
// `workers`, `explain`, `retry`, `job`.

let db: MigratedDatabase;
let ledger: Ledger;
let worker: Worker;

beforeAll(async () => {
  db = await createMigratedDatabase(4);
  ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
  // A worker on a queue nobody sends to: it only announces itself.
  worker = ledger.worker({ handlers: {}, queue: 'ov-idle', workerId: 'ov-worker', presenceIntervalMs: 1_000 });
  worker.start();
  await ledger.enqueueMany([
    { name: 'sync', key: 'ov:a', limit: 1, jobId: 'ov-1' },
    { name: 'sync', key: 'ov:a', jobId: 'ov-2' },
    { name: 'sync', key: 'ov:b', limit: 1, jobId: 'ov-dead', maxAttempts: 1 },
  ]);
  const run = async (key: string, command: Parameters<Ledger['execute']>[1]) => {
    const result = await ledger.execute(keyStream(key), command);
    if (result._tag === 'Left') throw new Error(JSON.stringify(result.left));
  };
  await run('ov:a', { type: 'Start', jobId: 'ov-1', leaseId: 'ov-1:1', workerId: 'ov-worker' });
  await run('ov:b', { type: 'Start', jobId: 'ov-dead', leaseId: 'ov-dead:1', workerId: 'ov-worker' });
  await run('ov:b', { type: 'Fail', jobId: 'ov-dead', leaseId: 'ov-dead:1', error: 'upstream said 503', jitter: 0 });
});

afterAll(async () => {
  await worker?.stop();
  await ledger?.close();
  await db?.drop();
});

const jobledger = (...args: string[]) => runCli(db.url, args);
const eventCount = async (): Promise<number> => (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;

describe('the operator commands, as processes', () => {
  it('workers lists the worker that announced itself, live, with its queue', async () => {
    // Its first beat is written as it starts, not before start() returns.
    await until(async () => (await db.pool.query(`SELECT 1 FROM workers WHERE id = 'ov-worker'`)).rowCount, (n) => n === 1, 'the worker announced');
    const listed = await jobledger('workers', '--json');
    expect(listed.code, listed.stderr).toBe(0);
    const workers = JSON.parse(listed.stdout) as { id: string; queue: string; state: string }[];
    expect(workers).toEqual([expect.objectContaining({ id: 'ov-worker', queue: 'ov-idle', state: 'live' })]);
    const table = await jobledger('workers');
    expect(table.stdout).toContain('ov-worker');
  });

  it('explain says where a parked job stands and who holds the slot ahead of it', async () => {
    const explained = await jobledger('explain', '--job', 'ov-2', '--json');
    expect(explained.code, explained.stderr).toBe(0);
    expect(JSON.parse(explained.stdout)).toMatchObject({ jobId: 'ov-2', status: 'parked', limits: [{ holders: [{ jobId: 'ov-1', lease: { state: 'running', workerId: 'ov-worker' } }] }] });
    const words = await jobledger('explain', '--job', 'ov-2');
    expect(words.stdout).toContain('ov-1');
    await expectRefused(jobledger, eventCount, ['explain', '--job', 'ov-nosuch'], 'ov-nosuch');
  });

  it('jobs lists the dead job by status, name and queue; failed names the jobs waiting for a retry', async () => {
    const list = async (...flags: string[]) => (JSON.parse((await jobledger('jobs', ...flags, '--json')).stdout) as { jobs: { jobId: string }[] }).jobs.map((j) => j.jobId);
    expect(await list('--status', 'dead', '--name', 'sync', '--queue', 'default')).toEqual(['ov-dead']);
    expect(await list('--status', 'dead', '--queue', 'elsewhere')).toEqual([]);
    expect(await list('--status', 'failed')).toEqual([]);
  });

  it('retry runs a dead job again, recorded with who; a job that is not dead is refused and nothing is written', async () => {
    await expectRefused(jobledger, eventCount, ['retry', '--job', 'ov-2', '--by', 'alice'], 'ov-2');
    const retried = await jobledger('retry', '--job', 'ov-dead', '--by', 'alice', '--json');
    expect(retried.code, retried.stderr).toBe(0);
    expect(JSON.parse(retried.stdout)).toMatchObject({ retried: [{ jobId: 'ov-dead', status: 'acquired' }] });
    const history = await jobledger('job', '--job', 'ov-dead', '--json');
    expect(history.code, history.stderr).toBe(0);
    const { events } = JSON.parse(history.stdout) as { events: { type: string; by?: string | null }[] };
    expect(events.map((e) => e.type)).toContain('JobDead');
    expect(events.find((e) => e.type === 'JobRetried')).toMatchObject({ by: 'alice' });
  });

  it("explain names a holder whose worker stopped beating as worker-gone, not running", async () => {
    await worker.stop();
    const explained = JSON.parse((await jobledger('explain', '--job', 'ov-2', '--json')).stdout);
    expect(explained).toMatchObject({ limits: [{ holders: [{ jobId: 'ov-1', lease: { state: 'worker-gone', workerId: 'ov-worker' } }] }] });
    expect((await jobledger('explain', '--job', 'ov-2')).stdout).toContain('started by worker ov-worker, which no longer beats');
  });
});

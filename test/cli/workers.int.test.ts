import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registerWorkers } from '../../src/adapters/cli/commands/workers.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import type { Worker } from '../../src/adapters/worker/worker.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';
import { runCommandsInProcess } from './in-process.js';

// `jobledger workers [--all] [--json]`, on a commander program of its own, in this process
// (runCommandsInProcess), its stdout and stderr captured.

let db: MigratedDatabase;
let ledger: Ledger;
let live: Worker;
let stopped: Worker;

beforeAll(async () => {
  db = await createMigratedDatabase(6, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
  live = ledger.worker({ queue: 'cli-live', concurrency: 2, presenceIntervalMs: 1_000, handlers: {} });
  stopped = ledger.worker({ queue: 'cli-stopped', presenceIntervalMs: 1_000, handlers: {} });
  live.start();
  stopped.start();
  await until(async () => (await db.pool.query('SELECT count(*)::int AS n FROM workers')).rows[0].n, (n) => n === 2, 'both workers announced');
  await stopped.stop();
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

/** Runs `jobledger workers ...args`: stdout, stderr, and what was thrown. */
const run = (...args: string[]) => runCommandsInProcess(db.url, [registerWorkers], ['workers', ...args]);

describe('jobledger workers', () => {
  it('lists the live workers as a table, and says how many gone ones it leaves out', async () => {
    const { stdout, stderr, thrown } = await run();
    expect(thrown).toBeUndefined();
    expect(stdout).toContain(live.workerId);
    expect(stdout).toContain('cli-live');
    expect(stdout).not.toContain(stopped.workerId);
    expect(stdout.split('\n')[1]).toMatch(/worker.*queue.*state.*host.*pid.*concurrency.*running.*holding.*last seen.*started.*stopped/);
    expect(stderr).toBe('1 gone worker not shown (--all shows them)\n');
  });

  it('--all --json: live and gone, as the API gives them', async () => {
    const { stdout, stderr } = await run('--all', '--json');
    expect(stderr).toBe('');
    const workers = JSON.parse(stdout) as { id: string; state: string; queue: string; concurrency: number; stoppedAt: number | null }[];
    expect(workers.map((w) => [w.id, w.state, w.queue])).toEqual([
      [live.workerId, 'live', 'cli-live'],
      [stopped.workerId, 'gone', 'cli-stopped'],
    ]);
    expect(workers[0]).toMatchObject({ concurrency: 2, stoppedAt: null });
    expect(workers[1]!.stoppedAt).toEqual(expect.any(Number));
  });

  it('a flag it does not know is a usage error', async () => {
    const { thrown, stderr } = await run('--everything');
    expect(thrown).toMatchObject({ code: 'commander.unknownOption', exitCode: 1 });
    expect(stderr).toContain("unknown option '--everything'");
  });
});

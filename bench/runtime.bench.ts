// Measures jobs running on worker processes and prints the figures (never asserts on them).
//
//   npm run bench:runtime        # DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres
//   npm run bench:runtime -- handoff                     # the handoff scenario only
//   HANDOFF_SLICE=0 npm run bench:runtime                # workers' --handoff-slice (0: no direct handoff)
//
// Scenarios (each in a scratch database it drops): throughput of 20,000 no-op jobs over 200 keys
// x limit 2 and of 2,000 no-op jobs on one limit-1 key, on two worker processes x 8, with commits
// per job from pg_stat_database; and the handoff latency on 50 limit-1 keys with 5 ms jobs: from
// the commit of a holder's Complete (which promotes the next parked job in the same append) to
// the next job's handler start.
import { spawn, type ChildProcess } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { createLedger, type Ledger } from '../src/adapters/ledger.js';
import type { EnqueueInput } from '../src/commands/enqueue.js';
import { quantile, quiet, serverName, withScratchDatabase } from './scratch-database.js';

const CLI = new URL('../src/adapters/cli/main.js', import.meta.url).pathname;
const HANDLERS = new URL('./bench-handlers.js', import.meta.url).pathname;

interface Scenario {
  readonly url: string;
  readonly pool: pg.Pool;
  readonly ledger: Ledger;
  readonly workers: ChildProcess[];
}

const scenario = <T>(name: string, run: (s: Scenario) => Promise<T>): Promise<T> =>
  withScratchDatabase(name, async (url) => {
    // pipelined, like the ledger's own pool
    const pool = new pg.Pool({ connectionString: url, max: 8, pipeline: true } as pg.PoolConfig);
    pool.on('error', () => undefined);
    const ledger = await createLedger({ pool, logger: quiet, sweepIntervalMs: 500 });
    await pool.query('CREATE TABLE bench_starts (job_id text PRIMARY KEY, started_ms bigint NOT NULL)');
    const s: Scenario = { url, pool, ledger, workers: [] };
    try {
      return await run(s);
    } finally {
      for (const w of s.workers) w.kill('SIGKILL');
      await ledger.close();
      await pool.end();
    }
  });

const startWorkers = (s: Scenario, processes: number, concurrency: number) => {
  for (let i = 0; i < processes; i++) {
    const chain = process.env.HANDOFF_SLICE === undefined ? [] : ['--handoff-slice', process.env.HANDOFF_SLICE];
    const child = spawn(process.execPath, [CLI, 'worker', '--handlers', HANDLERS, '--concurrency', String(concurrency), ...chain, ...(i === 0 ? ['--sweeper'] : [])], {
      env: { ...process.env, DATABASE_URL: s.url, LOG_LEVEL: 'error' },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    s.workers.push(child);
  }
};

const completed = async (pool: pg.Pool): Promise<number> =>
  (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM jl_jobs WHERE status = 'completed'`)).rows[0]!.n;

const commits = async (pool: pg.Pool): Promise<number> =>
  Number((await pool.query<{ n: string }>('SELECT xact_commit AS n FROM pg_stat_database WHERE datname = current_database()')).rows[0]!.n);

const waitFor = async (pool: pg.Pool, jobs: number, timeoutMs = 600_000): Promise<void> => {
  const deadline = Date.now() + timeoutMs;
  while ((await completed(pool)) < jobs) {
    if (Date.now() > deadline) throw new Error(`only ${await completed(pool)} of ${jobs} jobs completed in time`);
    await new Promise((r) => setTimeout(r, 100));
  }
};

const throughput = async (name: string, inputs: readonly EnqueueInput[]) =>
  scenario(name, async (s) => {
    for (let i = 0; i < inputs.length; i += 1_000) await s.ledger.enqueueMany(inputs.slice(i, i + 1_000));
    // Stats are flushed lazily; a pause lets the enqueue's commits land before the baseline.
    await new Promise((r) => setTimeout(r, 1_200));
    const before = await commits(s.pool);
    const t = performance.now();
    startWorkers(s, 2, 8);
    await waitFor(s.pool, inputs.length);
    const seconds = (performance.now() - t) / 1000;
    await new Promise((r) => setTimeout(r, 1_200));
    const perJob = ((await commits(s.pool)) - before) / inputs.length;
    console.log(`${name}: ${inputs.length} jobs in ${seconds.toFixed(1)} s = ${(inputs.length / seconds).toFixed(0)} jobs/s (incl. worker start-up), ${perJob.toFixed(2)} commits per job`);
  });

const handoff = async () =>
  scenario('handoff', async (s) => {
    const keys = 50;
    const perKey = 20;
    startWorkers(s, 2, 8);
    await new Promise((r) => setTimeout(r, 1_500)); // workers up and listening
    const inputs: EnqueueInput[] = [];
    for (let i = 0; i < perKey; i++) for (let k = 0; k < keys; k++) inputs.push({ name: 'timed', key: `handoff:${k}`, limit: 1, jobId: `h-${k}-${i}` });
    await s.ledger.enqueueMany(inputs);
    await waitFor(s.pool, inputs.length);
    // JobPromoted shares its transaction with the JobCompleted that freed the slot. With
    // track_commit_timestamp on, the server knows when that transaction committed; otherwise the
    // transaction's start (`created`) stands for it, which adds the transaction's own duration.
    // `direct`: started in the promoting transaction itself (direct handoff), not through the queue.
    const commitTimes = (await s.pool.query<{ track_commit_timestamp: string }>('SHOW track_commit_timestamp')).rows[0]!.track_commit_timestamp === 'on';
    const from = commitTimes ? `pg_xact_commit_timestamp((e.transaction_id::text::bigint % 4294967296)::text::xid)` : 'e.created';
    const { rows } = await s.pool.query<{ ms: number; direct: boolean }>(
      `SELECT b.started_ms - (extract(epoch FROM ${from}) * 1000) AS ms,
              EXISTS (SELECT 1 FROM events s WHERE s.type = 'JobStarted' AND s.transaction_id = e.transaction_id AND s.data->>'leaseId' = e.data->>'leaseId') AS direct
       FROM events e JOIN bench_starts b ON b.job_id = e.data->>'jobId'
       WHERE e.type = 'JobPromoted'`,
    );
    console.log(`(from the ${commitTimes ? 'commit (track_commit_timestamp)' : "start of the promoting transaction (track_commit_timestamp is off)"} to the handler's start)`);
    const sorted = (rs: readonly { ms: number }[]) => rs.map((r) => Number(r.ms)).sort((a, b) => a - b);
    const figures = (ms: readonly number[]) =>
      `p50 ${quantile(ms, 0.5).toFixed(1)} ms, p99 ${quantile(ms, 0.99).toFixed(1)} ms, max ${ms[ms.length - 1]?.toFixed(1)} ms`;
    const ms = sorted(rows);
    const direct = sorted(rows.filter((r) => r.direct));
    const queued = sorted(rows.filter((r) => !r.direct));
    console.log(`handoff (${keys} limit-1 keys x ${perKey} jobs of 5 ms, 2 workers x 8): ${ms.length} handoffs, ${figures(ms)}`);
    console.log(`  direct (started in the promoting transaction): ${direct.length}, ${figures(direct)}`);
    console.log(`  through the queue: ${queued.length}, ${queued.length > 0 ? figures(queued) : '-'}`);
  });

const only = process.argv[2];

const main = async () => {
  console.log(`jobledger runtime bench — ${serverName}\n`);
  if (only === undefined || only === 'handoff') await handoff();
  if (only === 'handoff') return;
  await throughput('200 keys x limit 2', Array.from({ length: 20_000 }, (_, i) => ({ name: 'noop', key: `k${i % 200}`, limit: 2 })));
  await throughput('one limit-1 key', Array.from({ length: 2_000 }, () => ({ name: 'noop', key: 'single', limit: 1 })));
};

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});

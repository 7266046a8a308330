/**
 * Stacked limits and a queue cap across worker processes: 3 `jobledger worker` processes
 * (concurrency 4 each, one with --sweeper, all with --queue-cap builds=3) run jobs of queue
 * `builds` that are each under their key repo:<0..5> (limit 2), a tenant limit key (tenant:A limit
 * 2 or tenant:B limit 4) and the queue's cap key queue:builds (limit 3). The handlers
 * (test/fixtures/stacked-handlers.mjs) write their own start and end times to a file; the overlap
 * under each key is computed from those intervals, and the ledger (events table, read models,
 * replay --verify) is checked afterwards.
 */
import { randomBytes } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { runCli } from '../support/cli.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';
import { isRunning, startWorkerProcess, stopWorkerProcess, untilReading, type WorkerProcess } from '../support/worker-process.js';

const HANDLERS = new URL('../fixtures/stacked-handlers.mjs', import.meta.url).pathname;
const RUNS_FILE = join(tmpdir(), `jobledger-stacked-${process.pid}-${randomBytes(4).toString('hex')}.jsonl`);

const QUEUE = 'builds';
const CAP_KEY = `queue:${QUEUE}`;
const REPOS = 6;
const REPO_LIMIT = 2;
const TENANT_LIMITS: Record<string, number> = { 'tenant:A': 2, 'tenant:B': 4 };

interface Run {
  readonly jobId: string;
  readonly keys: readonly string[];
  readonly start: number;
  readonly end: number;
  readonly attempt: number;
  readonly pid: number;
}

let db: MigratedDatabase;
let ledger: Ledger | undefined;
const procs: WorkerProcess[] = [];

const startWorker = (name: string, cap: number, sweeper = false): WorkerProcess => {
  const proc = startWorkerProcess(name, ['--handlers', HANDLERS, '--queue', QUEUE, '--concurrency', '4', '--queue-cap', `${QUEUE}=${cap}`, ...(sweeper ? ['--sweeper'] : [])], {
    DATABASE_URL: db.url,
    STACKED_RUNS_FILE: RUNS_FILE,
  });
  procs.push(proc);
  return proc;
};

const running = isRunning;
const stop = stopWorkerProcess;
const untilReadingQueue = (p: WorkerProcess) => untilReading(p, QUEUE);

const readRuns = async (): Promise<Run[]> =>
  (await readFile(RUNS_FILE, 'utf8'))
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as Run);

/** Most runs under `key` at once: for each start, the intervals [start, end) containing it. */
const mostAtOnce = (runs: readonly Run[], key: string): { most: number; at: number; jobs: string[] } => {
  const under = runs.filter((r) => r.keys.includes(key));
  let best = { most: 0, at: 0, jobs: [] as string[] };
  for (const r of under) {
    const containing = under.filter((o) => o.start <= r.start && r.start < o.end);
    if (containing.length > best.most) best = { most: containing.length, at: r.start, jobs: containing.map((o) => o.jobId) };
  }
  return best;
};

const completedCounts = async (): Promise<Map<string, number>> => {
  const { rows } = await db.pool.query<{ job_id: string; n: number }>(`SELECT data->>'jobId' AS job_id, count(*)::int AS n FROM events WHERE type = 'JobCompleted' GROUP BY 1`);
  return new Map(rows.map((r) => [r.job_id, r.n]));
};

const untilCompleted = (jobIds: readonly string[], what: string) =>
  until(
    async () => {
      const done = await completedCounts();
      return jobIds.filter((id) => !done.has(id));
    },
    (missing) => missing.length === 0,
    what,
  );

const limitSets = async (key: string): Promise<[number, string | null][]> => {
  const { rows } = await db.pool.query<{ data: { limit: number; by: string | null } }>(`SELECT data FROM events WHERE stream = $1 AND type = 'KeyLimitSet' ORDER BY stream_revision`, [keyStream(key)]);
  return rows.map((r) => [r.data.limit, r.data.by]);
};

const leftovers = async () =>
  (
    await db.pool.query<{ parked: number; slots: number; guests: number }>(
      `SELECT (SELECT count(*)::int FROM jl_parked) AS parked, (SELECT count(*)::int FROM jl_slots) AS slots, (SELECT count(*)::int FROM jl_limit_jobs) AS guests`,
    )
  ).rows[0]!;

/** Events that mean something went wrong (a retry, a lease lapse, a dead job, a refusal). */
const troubleEvents = async () =>
  (await db.pool.query<{ stream: string; type: string; data: unknown }>(`SELECT stream, type, data FROM events WHERE type IN ('JobFailed', 'JobDead', 'LeaseExpired', 'LeaseRevoked', 'JobYielded', 'JobCancelled', 'ParkedDiscarded', 'JobRejected') ORDER BY global_position`)).rows;

// Job i: key repo:<i % 6>, tenant A or B by floor(i / 6) (so every repo has jobs of both tenants), 40-70 ms (long enough that jobs admitted together overlap in the handlers' own times, even on a loaded machine).
const job = (i: number, prefix: string) => {
  const repo = `repo:${i % REPOS}`;
  const tenant = Math.floor(i / REPOS) % 2 === 0 ? 'tenant:A' : 'tenant:B';
  return {
    jobId: `${prefix}${i}`,
    name: 'stacked',
    queue: QUEUE,
    key: repo,
    limit: REPO_LIMIT,
    tenant,
    limits: [{ key: tenant, limit: TENANT_LIMITS[tenant]! }],
    args: { ms: 40 + ((i * 7) % 31), keys: [repo, tenant, CAP_KEY] },
  };
};
const input = ({ tenant: _tenant, ...j }: ReturnType<typeof job>) => j;

/** The same job through the CLI: --limit-key and --queue-cap. */
const enqueueByCli = async (j: ReturnType<typeof job>): Promise<void> => {
  const r = await runCli(db.url, [
    'enqueue', j.name, '--job-id', j.jobId, '--queue', QUEUE, '--key', j.key, '--limit', String(j.limit),
    '--limit-key', `${j.tenant}=${TENANT_LIMITS[j.tenant]}`, '--queue-cap', `${QUEUE}=3`, '--args', JSON.stringify(j.args), '--json',
  ]);
  expect(r.code, r.stderr).toBe(0);
  expect(['acquired', 'parked']).toContain((JSON.parse(r.stdout) as { status: string }).status);
};

beforeAll(async () => {
  await writeFile(RUNS_FILE, '');
  db = await createMigratedDatabase(10, { pipeline: true });
  const table = await db.pool.query(`SELECT to_regclass('jl_limit_jobs') IS NOT NULL AS ok`);
  if (!table.rows[0].ok) throw new Error('jl_limit_jobs is missing: the migrations do not include 0008-limit-keys');
});

afterAll(async () => {
  await Promise.all(procs.map((p) => stop(p)));
  await ledger?.close();
  await db?.drop();
  await rm(RUNS_FILE, { force: true });
});

describe('stacked limits and a queue cap across worker processes', () => {
  const JOBS = 120;
  const ids = Array.from({ length: JOBS }, (_, i) => `s${i}`);

  it('3 processes x concurrency 4, 120 jobs under repo:* (2), tenant:A (2) / tenant:B (4) and queue:builds (3): no key over its limit, the cap reached, every job once, nothing left', async () => {
    const workers = [startWorker('worker-1', 3, true), startWorker('worker-2', 3), startWorker('worker-3', 3)];
    await Promise.all(workers.map(untilReadingQueue));
    // The cap came from the workers' configuration, before any job.
    expect((await limitSets(CAP_KEY))[0]).toEqual([3, 'config']);
    ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger, queues: { [QUEUE]: { maxConcurrent: 3 } } });

    const jobs = Array.from({ length: JOBS }, (_, i) => job(i, 's'));
    // Burst 1: one bulk enqueue.
    await ledger.enqueueMany(jobs.slice(0, 45).map(input));
    await until(completedCounts, (c) => c.size >= 10, 'burst 1 to be under way');
    // Burst 2: single enqueues at once, and four through the CLI (--limit-key, --queue-cap).
    await Promise.all([...jobs.slice(45, 81).map((j) => ledger!.enqueue(input(j))), ...jobs.slice(81, 85).map(enqueueByCli)]);
    await until(completedCounts, (c) => c.size >= 60, 'burst 2 to be under way');
    // Burst 3: the rest in bulk.
    await ledger.enqueueMany(jobs.slice(85).map(input));

    await untilCompleted(ids, 'every job to complete');
    // Every job completed exactly once in the ledger, and its handler ran once.
    const completed = await completedCounts();
    expect([...completed].filter(([id, n]) => id.startsWith('s') && n !== 1)).toEqual([]);
    const runs = await readRuns();
    expect(runs.map((r) => r.jobId).sort()).toEqual([...ids].sort());
    expect(await troubleEvents()).toEqual([]);
    for (const w of workers) expect({ name: w.name, running: running(w), stderr: w.stderr.slice(-1_000) }).toMatchObject({ running: true });

    // No key ever over its limit, from the handlers' own intervals.
    const most = Object.fromEntries([CAP_KEY, ...Object.keys(TENANT_LIMITS), ...Array.from({ length: REPOS }, (_, r) => `repo:${r}`)].map((k) => [k, mostAtOnce(runs, k)]));
    const over = Object.entries(most).filter(([k, m]) => m.most > (k === CAP_KEY ? 3 : (TENANT_LIMITS[k] ?? REPO_LIMIT)));
    expect(over).toEqual([]);
    // ...and the limits did bind: the queue cap was reached (3 at once, though tenant:B and the
    // repos would have let more run), and so was tenant:A's.
    expect(most[CAP_KEY]!.most).toBe(3);
    expect(most['tenant:A']!.most).toBe(2);

    // Nothing parked, held or waiting on a limit key at the end.
    await until(leftovers, (l) => l.parked + l.slots + l.guests === 0, 'no parked job, slot or limit-key guest left');
    expect(await limitSets(CAP_KEY)).toEqual([[3, 'config']]);
    const verified = await runCli(db.url, ['replay', '--verify']);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
  });

  it('issue 21 #2: a worker restarted with --queue-cap builds=4 is refused (the ledger holds 3); the operator raises the cap with set-limit, recorded with who, and then up to 4 run at once', async () => {
    expect(ledger, 'the first case ran').toBeDefined();
    const restarted = procs.find((p) => p.name === 'worker-3')!;
    await stop(restarted, 10_000);
    expect(restarted.child.exitCode, restarted.stderr.slice(-1_000)).toBe(0);
    const refused = startWorker('worker-3x', 4);
    await refused.exited;
    expect(refused.child.exitCode, refused.stderr).toBe(2);
    expect(refused.stderr).toContain(`queue "${QUEUE}" has cap 3 in the ledger, not 4`);
    expect(await limitSets(CAP_KEY)).toEqual([[3, 'config']]);
    const raise = await runCli(db.url, ['set-limit', '--key', CAP_KEY, '--limit', '4', '--by', 'ops']);
    expect(raise.code, raise.stderr).toBe(0);
    const raised = startWorker('worker-3b', 4);
    await untilReadingQueue(raised);
    expect(await limitSets(CAP_KEY)).toEqual([[3, 'config'], [4, 'ops']]);

    const MORE = 48;
    const jobs = Array.from({ length: MORE }, (_, i) => job(i, 'r'));
    await ledger!.enqueueMany(jobs.map(input));
    await untilCompleted(jobs.map((j) => j.jobId), 'the jobs after the raise to complete');
    const completed = await completedCounts();
    expect([...completed].filter(([, n]) => n !== 1)).toEqual([]);
    expect(completed.size).toBe(JOBS + MORE);
    expect(await troubleEvents()).toEqual([]);

    const runs = (await readRuns()).filter((r) => r.jobId.startsWith('r'));
    expect(runs).toHaveLength(MORE);
    const cap = mostAtOnce(runs, CAP_KEY);
    expect(cap.most).toBe(4);
    for (const [k, limit] of Object.entries(TENANT_LIMITS)) expect(mostAtOnce(runs, k).most, k).toBeLessThanOrEqual(limit);
    for (let r = 0; r < REPOS; r++) expect(mostAtOnce(runs, `repo:${r}`).most, `repo:${r}`).toBeLessThanOrEqual(REPO_LIMIT);

    await until(leftovers, (l) => l.parked + l.slots + l.guests === 0, 'no parked job, slot or limit-key guest left');
    const verified = await runCli(db.url, ['replay', '--verify']);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
    for (const w of procs.filter((p) => p !== restarted && p !== refused)) expect({ name: w.name, running: running(w), stderr: w.stderr.slice(-1_000) }).toMatchObject({ running: true });
  });
});

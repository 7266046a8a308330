/**
 * Chaos: worker processes and `serve` under load while the database restarts (fast, then
 * immediate) and a worker is killed with SIGKILL. The server is a private embedded PostgreSQL
 * (not the suite's), so this test may stop and start it.
 *
 * Guards the issue-10 regression "a PostgreSQL restart crashes worker processes" (an unhandled
 * 'error' of a checked-out pg client) and its companions: a handler's completion lost during the
 * outage (the job then ran twice), a log line per failed statement instead of one per outage.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { largestOverlap, type TimedRun } from '../../src/adapters/cli/commands/demo.js';
import { createLedger } from '../../src/adapters/ledger.js';
import { startEmbeddedPostgres, type EmbeddedServer } from '../../src/adapters/postgres/embedded-server.js';
import { CLI, runCli } from '../support/cli.js';
import { postmasters } from '../support/postmasters.js';

const HANDLERS = new URL('../fixtures/file-recording-handlers.mjs', import.meta.url).pathname;

const JOBS = 1_200;
const KEYS = 24;
const LIMIT = 2;
const JOB_MS = 50;
// Short, so the killed worker's jobs come back within the test; renewed every second.
const LEASE_MS = 3_000;

// Under the OS temp dir, world-searchable: as root, postgres runs as user `postgres` and must reach it.
const base = join(tmpdir(), `jobledger-chaos-${process.pid}-${randomBytes(4).toString('hex')}`);
const dataDir = join(base, 'data');
const runsFile = join(base, 'runs.jsonl');
// fsync off is safe here (the machine does not crash, only the server); synchronous_commit stays
// on, so a commit a worker was told about survives an immediate shutdown.
const flags = ['-c', 'fsync=off', '-c', 'full_page_writes=off'];

let server: EmbeddedServer;
let url: string;

interface Proc {
  readonly name: string;
  readonly child: ChildProcess;
  stderr: string;
}
const procs: Proc[] = [];

const spawnCli = (name: string, args: readonly string[]): Proc => {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { ...process.env, DATABASE_URL: url, LOG_LEVEL: 'info', RUNS_FILE: runsFile },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const proc: Proc = { name, child, stderr: '' };
  child.stderr?.on('data', (chunk: Buffer) => (proc.stderr += chunk.toString()));
  procs.push(proc);
  return proc;
};

const startServer = (port?: number): Promise<EmbeddedServer> =>
  startEmbeddedPostgres({ dataDir, persistent: true, postgresFlags: flags, initdbFlags: ['--no-sync'], ...(port ? { port } : {}) });

/**
 * Stops the postmaster the hard way (SIGINT: fast shutdown, SIGQUIT: immediate), stays down for
 * `downMs` (running `whileDown` meanwhile), starts it again; resolves to when it answered.
 */
const restart = async (signal: 'SIGINT' | 'SIGQUIT', downMs: number, whileDown?: () => void): Promise<number> => {
  process.kill(server.pid, signal);
  const deadline = Date.now() + 20_000;
  while ((await postmasters(dataDir)).length > 0) {
    if (Date.now() > deadline) throw new Error('postmaster did not stop');
    await sleep(50);
  }
  whileDown?.();
  await sleep(downMs);
  server = await startServer(server.port);
  return Date.now();
};

/** A query on a connection of its own, or undefined while the server does not answer. */
const probe = async <R extends pg.QueryResultRow>(sql: string): Promise<R[] | undefined> => {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return (await client.query<R>(sql)).rows;
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => undefined);
  }
};

interface RunRecord {
  jobId: string;
  key: string;
  attempt: number;
  pid: number;
  what: 'start' | 'end';
  at: number;
}

/** A key's runs as intervals; a run with no end lasted until its process died (`killedAt`). */
const timedRuns = (records: readonly RunRecord[], killedAt: Map<number, number>): TimedRun[] => {
  const runs = new Map<string, { key: string; start: number; end: number }>();
  for (const r of records) {
    const id = `${r.jobId}/${r.attempt}/${r.pid}`;
    if (r.what === 'start') runs.set(id, { key: r.key, start: r.at, end: killedAt.get(r.pid) ?? Number.MAX_SAFE_INTEGER });
    else runs.get(id)!.end = r.at;
  }
  return [...runs.values()];
};

beforeAll(async () => {
  await mkdir(base, { recursive: true });
  await chmod(base, 0o755);
  await writeFile(runsFile, '');
  server = await startServer();
  url = server.url.replace(/\/postgres$/, '/chaos');
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query('CREATE DATABASE chaos');
  await admin.end();
});

afterAll(async () => {
  for (const p of procs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  await server?.stop();
  await rm(base, { recursive: true, force: true });
});

describe('a database restart under load', () => {
  it('no process dies, every job completes exactly once, no key over its limit, one log line per outage', async () => {
    const ledger = await createLedger({ databaseUrl: url, poolSize: 2 });
    const jobs = Array.from({ length: JOBS }, (_, i) => ({ name: 'sleep', args: { ms: JOB_MS }, key: `k${i % KEYS}`, limit: LIMIT, leaseMs: LEASE_MS, jobId: `chaos-${i}` }));
    await ledger.enqueueMany(jobs);
    await ledger.close();

    const workerArgs = (sweeper: boolean) => ['worker', '--handlers', HANDLERS, '--concurrency', '4', ...(sweeper ? ['--sweeper'] : [])];
    const workers = [spawnCli('worker-1', workerArgs(true)), spawnCli('worker-2', workerArgs(true)), spawnCli('worker-3', workerArgs(false))];
    const serve = spawnCli('serve', ['serve', '--port', '0']);

    const killedAt = new Map<number, number>();
    await sleep(1_500);
    const answered = [await restart('SIGINT', 1_000)];
    await sleep(1_000);
    // The sweeper's leader: its jobs come back after their leases, and the other sweeper takes over.
    const victim = workers[0]!;
    victim.child.kill('SIGKILL');
    killedAt.set(victim.child.pid!, Date.now());
    await sleep(1_000);
    // A worker started while the database is down waits for it instead of exiting.
    let late: Proc | undefined;
    answered.push(await restart('SIGQUIT', 1_500, () => (late = spawnCli('worker-4', workerArgs(false)))));
    const outages = 2;

    const deadline = Date.now() + 45_000;
    let finished = 0;
    while (finished < JOBS) {
      if (Date.now() > deadline) throw new Error(`only ${finished} of ${JOBS} jobs finished`);
      await sleep(200);
      const rows = await probe<{ n: number }>(`SELECT count(*)::int AS n FROM jl_jobs WHERE status = 'completed'`);
      finished = rows?.[0]?.n ?? finished;
    }

    for (const p of procs.filter((p) => p !== victim)) expect({ name: p.name, exit: p.child.exitCode, signal: p.child.signalCode, stderr: p.stderr.slice(-2_000) }).toMatchObject({ exit: null, signal: null });

    // Each completion is in the ledger once; no handler outside the killed process ended twice.
    const completed = await probe<{ n: number; jobs: number }>(`SELECT count(*)::int AS n, count(DISTINCT data->>'jobId')::int AS jobs FROM events WHERE type = 'JobCompleted'`);
    expect(completed?.[0]).toEqual({ n: JOBS, jobs: JOBS });
    const records = (await readFile(runsFile, 'utf8')).trim().split('\n').map((line) => JSON.parse(line) as RunRecord);
    const survivorEnds = new Map<string, number>();
    for (const r of records) if (r.what === 'end' && !killedAt.has(r.pid)) survivorEnds.set(r.jobId, (survivorEnds.get(r.jobId) ?? 0) + 1);
    expect([...survivorEnds].filter(([, n]) => n > 1)).toEqual([]);
    expect(new Set(records.filter((r) => r.what === 'end').map((r) => r.jobId)).size).toBe(JOBS);

    // Work resumed within 5 s of the database answering, after each restart; the late worker ran jobs.
    for (const at of answered) {
      const next = records.filter((r) => r.what === 'start' && r.at >= at).map((r) => r.at);
      expect(Math.min(...next) - at, 'ms from the database answering to the next handler start').toBeLessThan(5_000);
    }
    expect(records.filter((r) => r.pid === late!.child.pid).length, 'runs of the worker started while the database was down').toBeGreaterThan(0);
    const lateLines = late!.stderr.split('\n').filter((l) => /PostgreSQL (unreachable|answers again)/.test(l));
    expect(lateLines.map((l) => (JSON.parse(l) as { msg: string }).msg.split(';')[0]!.replace(/after .*/, 'after'))).toEqual(['PostgreSQL unreachable', 'PostgreSQL answers again after']);

    const byKey = new Map<string, RunRecord[]>();
    for (const r of records) byKey.set(r.key, [...(byKey.get(r.key) ?? []), r]);
    const overLimit = [...byKey]
      .map(([key, rs]) => ({ key, most: largestOverlap(timedRuns(rs, killedAt)) }))
      .filter((k) => k.most > LIMIT);
    expect(overLimit).toEqual([]);

    // Nothing left parked or holding a slot once everything completed.
    expect(await probe(`SELECT (SELECT count(*)::int FROM jl_parked) AS parked, (SELECT count(*)::int FROM jl_slots) AS slots`)).toEqual([{ parked: 0, slots: 0 }]);

    // serve answers after the outages.
    const listening = /serving (http:\/\/[^\s/]+)/.exec(serve.stderr)?.[1];
    expect(listening, serve.stderr).toBeDefined();
    expect((await fetch(`${listening}/api/keys`)).status).toBe(200);

    // One warning when an outage begins and one line when it ends, per process; never an object
    // dump. A worker notices each outage (its LISTEN connection drops); serve only those it was
    // talking to the database through.
    for (const p of procs.filter((p) => p !== victim && p !== late)) {
      const lines = p.stderr.split('\n').filter((l) => l.startsWith('{'));
      const began = lines.filter((l) => l.includes('PostgreSQL unreachable')).length;
      const ended = lines.filter((l) => l.includes('PostgreSQL answers again')).length;
      const noticed = p === serve ? Math.max(1, Math.min(began, outages)) : outages;
      const outageLines = lines.filter((l) => /PostgreSQL (unreachable|answers again)/.test(l));
      expect({ name: p.name, began, ended }, outageLines.join('\n')).toEqual({ name: p.name, began: noticed, ended: noticed });
      expect(lines.filter((l) => l.length > 1_000).map((l) => `${l.slice(0, 200)} … ${l.slice(-200)}`)).toEqual([]);
    }

    const verified = await runCli(url, ['replay', '--verify']);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
  });
});

/**
 * The ledger distributed on a Citus cluster, end to end (issue 24): the peer bench's workload
 * shapes (keyed: many keys of limit 2; hot: one key of limit 1; many keys of limit 1) run at once
 * by `jobledger worker` processes on the coordinator, one killed (SIGKILL) mid-run and replaced.
 * The handlers (test/fixtures/interval-handlers.mjs) record when each run started and ended; from
 * those no key ran more than its limit at once, from the ledger each key's holders never exceeded
 * its limit, every job completed exactly once, nothing is left held or parked, and replay
 * --verify finds the read models what the ledger gives.
 */
import { randomBytes } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { apply, draftOf, initialKeyState } from '../../src/domain/key-state.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { decodeRecorded } from '../../src/domain/recorded.js';
import { keyStream } from '../../src/domain/streams.js';
import { createCitusDatabase, type CitusDatabase } from '../support/citus.js';
import { runCli } from '../support/cli.js';
import { until } from '../support/until.js';
import { isRunning, startWorkerProcess, untilReading, type WorkerProcess } from '../support/worker-process.js';

const HANDLERS = new URL('../fixtures/interval-handlers.mjs', import.meta.url).pathname;
const RUNS_FILE = join(tmpdir(), `jobledger-citus-${process.pid}-${randomBytes(4).toString('hex')}.jsonl`);
const QUEUE = 'citus';
/** Short, so that the killed worker's leases lapse within the test. */
const LEASE_MS = 2_000;

let db: CitusDatabase;
let pool: pg.Pool;
let ledger: Ledger;
const procs: WorkerProcess[] = [];

const startWorker = (name: string, sweeper = false): WorkerProcess => {
  const proc = startWorkerProcess(name, ['--handlers', HANDLERS, '--queue', QUEUE, '--concurrency', '8', ...(sweeper ? ['--sweeper'] : [])], { DATABASE_URL: db.url, INTERVALS_FILE: RUNS_FILE });
  procs.push(proc);
  return proc;
};

const untilReadingQueue = (p: WorkerProcess) => untilReading(p, QUEUE, 60_000);

interface Run {
  readonly jobId: string;
  readonly key: string;
  readonly limit: number;
  readonly pid: number;
  readonly start: number;
  readonly end: number;
}

/** Each run's interval; one whose process was killed before it ended, up to the kill. */
const readRuns = async (killed: ReadonlyMap<number, number>): Promise<Run[]> => {
  type Line = { jobId: string; key: string; limit: number; pid: number; attempt: number; start?: number; end?: number };
  const lines = (await readFile(RUNS_FILE, 'utf8')).split('\n').filter((l) => l.length > 0).map((l) => JSON.parse(l) as Line);
  const ends = new Map(lines.filter((l) => l.end !== undefined).map((l) => [`${l.jobId}/${l.pid}/${l.attempt}`, l.end!]));
  return lines
    .filter((l) => l.start !== undefined)
    .map((l) => ({ jobId: l.jobId, key: l.key, limit: l.limit, pid: l.pid, start: l.start!, end: ends.get(`${l.jobId}/${l.pid}/${l.attempt}`) ?? killed.get(l.pid) ?? Number.POSITIVE_INFINITY }));
};

/** Most runs of one key at once: for each start, the intervals [start, end) containing it. */
const mostAtOnce = (runs: readonly Run[]): number => Math.max(0, ...runs.map((r) => runs.filter((o) => o.start <= r.start && r.start < o.end).length));

const completedCounts = async (): Promise<Map<string, number>> => {
  const { rows } = await pool.query<{ job_id: string; n: number }>(`SELECT data->>'jobId' AS job_id, count(*)::int AS n FROM events WHERE type = 'JobCompleted' GROUP BY 1`);
  return new Map(rows.map((r) => [r.job_id, r.n]));
};

/** The three workload shapes of ../shared/peer-bench (lib/workloads.mjs), scaled to a test. */
const WORKLOADS = [
  { name: 'keyed', jobs: 400, keys: 40, limit: 2, ms: 10 },
  { name: 'hot', jobs: 120, keys: 1, limit: 1, ms: 5 },
  { name: 'many', jobs: 400, keys: 200, limit: 1, ms: 5 },
] as const;

const jobsOf = (w: (typeof WORKLOADS)[number]) =>
  Array.from({ length: w.jobs }, (_, i) => {
    const key = `${w.name}/${i % w.keys}`;
    return { jobId: `${w.name}-${i}`, name: 'interval', queue: QUEUE, key, limit: w.limit, leaseMs: LEASE_MS, args: { ms: w.ms + (i % 7), key, limit: w.limit } };
  });

beforeAll(async () => {
  await writeFile(RUNS_FILE, '');
  db = await createCitusDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  ledger = await createLedger({ databaseUrl: db.url, logger: silentLogger });
});

afterAll(async () => {
  for (const p of procs) if (isRunning(p)) p.child.kill('SIGKILL');
  await Promise.all(procs.map((p) => p.exited));
  await ledger?.close();
  await pool?.end();
  await db?.drop();
  await rm(RUNS_FILE, { force: true });
});

describe('the peer bench workloads on a three-node cluster', () => {
  it('keyed, hot and many keys at once, a worker killed mid-run: no key over its limit, every job completed once, nothing left, replay --verify clean', async () => {
    const workers = [startWorker('worker-1', true), startWorker('worker-2')];
    await Promise.all(workers.map(untilReadingQueue));
    const all = WORKLOADS.flatMap(jobsOf);
    for (let i = 0; i < all.length; i += 200) await ledger.enqueueMany(all.slice(i, i + 200));

    // worker-2 is killed once a third is done, and worker-3 takes its place.
    await until(completedCounts, (c) => c.size >= all.length / 3, 'a third of the jobs to complete', 120_000);
    const victim = workers[1]!;
    const killedAt = Date.now();
    victim.child.kill('SIGKILL');
    await victim.exited;
    const replacement = startWorker('worker-3');
    await untilReadingQueue(replacement);

    const missing = await until(
      async () => {
        const done = await completedCounts();
        return all.filter((j) => !done.has(j.jobId)).map((j) => j.jobId);
      },
      (m) => m.length === 0,
      'every job to complete',
      240_000,
    );
    expect(missing).toEqual([]);

    // Every job completed exactly once in the ledger.
    const completed = await completedCounts();
    expect([...completed].filter(([, n]) => n !== 1)).toEqual([]);
    expect(completed.size).toBe(all.length);

    // From the handlers' own intervals: no key ran more than its limit at once, and the limits bound.
    const runs = await readRuns(new Map([[victim.child.pid!, killedAt]]));
    const byKey = new Map<string, Run[]>();
    for (const r of runs) byKey.set(r.key, [...(byKey.get(r.key) ?? []), r]);
    const over = [...byKey].filter(([, rs]) => mostAtOnce(rs) > rs[0]!.limit).map(([key, rs]) => [key, mostAtOnce(rs)]);
    expect(over).toEqual([]);
    // And a limit of 2 admitted two at once somewhere (which of the 40 keys is the scheduler's choice).
    expect([...byKey].filter(([key, rs]) => key.startsWith('keyed/') && mostAtOnce(rs) === 2).length).toBeGreaterThan(0);

    // From the ledger: each key's holders never exceeded its limit, event after event.
    for (const key of byKey.keys()) {
      const state = draftOf(initialKeyState);
      for (const recorded of await ledger.store.readStream(keyStream(key))) {
        apply(state, decodeRecorded(recorded));
        expect(state.holding, `${key} at revision ${recorded.revision}`).toBeLessThanOrEqual(state.limit);
      }
    }

    // The killed worker's jobs went back and ran again: their leases lapsed, the sweeper took them.
    const { rows: expired } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM events WHERE type = 'LeaseExpired'`);
    expect(expired[0]!.n).toBeGreaterThan(0);

    // Nothing held or parked; the read models are what the ledger gives.
    const { rows: left } = await pool.query<{ parked: number; slots: number }>(`SELECT (SELECT count(*)::int FROM jl_parked) AS parked, (SELECT count(*)::int FROM jl_slots) AS slots`);
    expect(left[0]).toEqual({ parked: 0, slots: 0 });
    const verified = await runCli(db.url, ['replay', '--verify']);
    expect(verified.code, verified.stdout + verified.stderr).toBe(0);
    for (const w of [workers[0]!, replacement]) expect({ name: w.name, running: isRunning(w), stderr: w.stderr.slice(-1_000) }).toMatchObject({ running: true });
  });
});

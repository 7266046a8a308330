import { spawn, type ChildProcess } from 'node:child_process';
import * as E from 'fp-ts/lib/Either.js';
import { afterEach, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { decodeRecorded } from '../../src/domain/recorded.js';
import { fold, holders, initialKeyState, jobsIn } from '../../src/domain/key-state.js';
import type { RecordedEvent } from '../../src/domain/ports/event-store.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until as untilWithin } from '../support/until.js';
import { CLI } from '../support/cli.js';

/** Worker processes on a loaded machine: a minute for each condition. */
const until = <T>(probe: () => Promise<T>, done: (t: T) => boolean, what: string, timeoutMs = 60_000): Promise<T> => untilWithin(probe, done, what, timeoutMs);

// Worker processes are real child processes (the built CLI's `jobledger worker`); their handlers
// (test/fixtures/recording-handlers.mjs) record each run's start and end in `runs`. The test
// process enqueues and runs the sweeper.

const HANDLERS = new URL('../fixtures/recording-handlers.mjs', import.meta.url).pathname;

interface Run {
  job_id: string;
  key: string | null;
  attempt: number;
  worker: number;
  started_ms: string;
  ended_ms: string | null;
  outcome: string | null;
}

let db: MigratedDatabase;
let ledger: Ledger;
const children: ChildProcess[] = [];

const setup = async (sweepMs = 200) => {
  db = await createMigratedDatabase(10, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, sweepIntervalMs: sweepMs });
  ledger.start();
};

afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
  await ledger?.close();
  await db?.drop();
});

const startWorker = (...flags: string[]): ChildProcess => {
  const child = spawn(process.execPath, [CLI, 'worker', '--handlers', HANDLERS, ...flags], {
    env: { ...process.env, DATABASE_URL: db.url, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr?.on('data', (chunk: Buffer) => process.env.JOBLEDGER_E2E_VERBOSE && process.stderr.write(chunk));
  children.push(child);
  return child;
};

const runs = async (): Promise<Run[]> => {
  const exists = await db.pool.query(`SELECT to_regclass('runs') IS NOT NULL AS ok`);
  if (!exists.rows[0].ok) return [];
  return (await db.pool.query<Run>('SELECT * FROM runs ORDER BY started_ms')).rows;
};


const eventsOf = (key: string): Promise<RecordedEvent[]> => ledger.store.readStream(keyStream(key));

/** Largest number of runs of one key that overlapped in time. */
const largestOverlap = (keyRuns: readonly Run[]): number => {
  const edges = keyRuns.flatMap((r) => [
    { t: Number(r.started_ms), d: 1 },
    { t: Number(r.ended_ms ?? Number.MAX_SAFE_INTEGER), d: -1 },
  ]);
  // an end and a start at the same millisecond do not overlap
  edges.sort((a, b) => a.t - b.t || a.d - b.d);
  let now = 0;
  let max = 0;
  for (const e of edges) max = Math.max(max, (now += e.d));
  return max;
};

/** A handler records its end before the worker commits its Complete: wait for the ledger too. */
const untilSettled = (key: string) =>
  until(() => ledger.keyState(key), ({ state }) => Object.keys(state.jobs).length === 0, `key ${key} to have no job left`);

/** Folds the key's stream, checking the limit after every admission. */
const foldChecked = async (key: string) => {
  let state = initialKeyState;
  for (const e of await eventsOf(key)) {
    state = fold(state, [decodeRecorded(e)]);
    if (e.type === 'SlotAcquired' || e.type === 'JobPromoted') expect(holders(state).length).toBeLessThanOrEqual(state.limit);
  }
  return state;
};

describe('workers as separate processes', () => {
  it('3 processes x concurrency 4, 40 keys x limit 2, 400 jobs of 20-80 ms: overlap per key reaches the limit and never exceeds it; every job runs once', async () => {
    await setup();
    const keys = Array.from({ length: 40 }, (_, k) => `tenant:${k}`);
    const jobs = Array.from({ length: 400 }, (_, i) => ({ name: 'sleep', args: { ms: 20 + ((i * 37) % 61) }, key: keys[i % 40]!, limit: 2, jobId: `j${i}` }));
    await ledger.enqueueMany(jobs);
    for (let w = 0; w < 3; w++) startWorker('--concurrency', '4');
    const all = await until(runs, (r) => r.filter((x) => x.outcome === 'completed').length >= 400, '400 completed runs', 120_000);

    const completed = all.filter((r) => r.outcome === 'completed');
    expect(new Set(completed.map((r) => r.job_id)).size).toBe(400);
    expect(completed).toHaveLength(400);
    expect(all).toHaveLength(400);
    const overlaps = keys.map((key) => largestOverlap(all.filter((r) => r.key === key)));
    expect(Math.max(...overlaps)).toBe(2);
    for (const key of keys) {
      await untilSettled(key);
      const state = await foldChecked(key);
      expect(holders(state)).toEqual([]);
      expect(jobsIn(state, 'parked')).toEqual([]);
    }
    const { rows } = await db.pool.query('SELECT (SELECT count(*) FROM jl_slots)::int AS slots, (SELECT count(*) FROM jl_parked)::int AS parked');
    expect(rows[0]).toEqual({ slots: 0, parked: 0 });
  });

  /**
   * Leases that were started and then expired. On a loaded machine an admission's lease can also
   * lapse before a worker process is up to start it: such a lease was never started, burns no
   * attempt, and the job is simply admitted again; these tests speak of started leases only.
   */
  const startedLeasesExpired = (events: readonly RecordedEvent[]): string[] => {
    const started = new Set(events.flatMap((e) => (e.type === 'JobStarted' ? [e.data.leaseId as string] : [])));
    return events.flatMap((e) => (e.type === 'LeaseExpired' && started.has(e.data.leaseId as string) ? [e.data.leaseId as string] : []));
  };

  it('kill -9 of a worker holding a slot: after the lease LeaseExpired is recorded, the job is retried (attempt 2), the parked jobs promoted, nothing stranded', async () => {
    await setup();
    const key = 'killed';
    await ledger.enqueue({ name: 'hangOnce', key, limit: 1, leaseMs: 1_500, jobId: 'victim' });
    await ledger.enqueueMany(['p1', 'p2'].map((jobId) => ({ name: 'sleep', args: { ms: 30 }, key, limit: 1, leaseMs: 1_500, jobId })));
    const doomed = startWorker('--concurrency', '1');
    await until(runs, (r) => r.some((x) => x.job_id === 'victim'), 'the victim to start');
    doomed.kill('SIGKILL');
    startWorker('--concurrency', '2');

    const all = await until(runs, (r) => r.filter((x) => x.outcome === 'completed').length >= 3, 'p1, p2 and the retry to complete');
    expect(all.find((r) => r.job_id === 'victim' && r.outcome === 'completed')?.attempt).toBe(2);
    await untilSettled(key);
    const events = await eventsOf(key);
    // The lease the killed worker started (attempt 1) is the one started lease that expired.
    const killedLease = events.find((e) => e.type === 'JobStarted' && e.data.jobId === 'victim' && e.data.attempt === 1)?.data.leaseId;
    expect(startedLeasesExpired(events)).toEqual([killedLease]);
    expect(events.filter((e) => e.type === 'JobPromoted').map((e) => e.data.jobId)).toContain('p1');
    const state = await foldChecked(key);
    expect(Object.keys(state.jobs)).toEqual([]);
  });

  it('a job running four times its lease on a live worker keeps its slot; no other job of the key starts meanwhile', async () => {
    await setup(100);
    const key = 'long';
    await ledger.enqueue({ name: 'sleep', args: { ms: 4_000 }, key, limit: 1, leaseMs: 1_000, jobId: 'long' });
    await ledger.enqueue({ name: 'sleep', args: { ms: 10 }, key, limit: 1, leaseMs: 1_000, jobId: 'next' });
    startWorker('--concurrency', '2');
    const all = await until(runs, (r) => r.filter((x) => x.outcome === 'completed').length >= 2, 'both jobs');
    const long = all.find((r) => r.job_id === 'long')!;
    const next = all.find((r) => r.job_id === 'next')!;
    expect(Number(next.started_ms)).toBeGreaterThanOrEqual(Number(long.ended_ms));
    expect(all).toHaveLength(2);
    const events = await eventsOf(key);
    expect(startedLeasesExpired(events)).toEqual([]);
    expect(events.filter((e) => e.type === 'LeaseRenewed').length).toBeGreaterThanOrEqual(9);
  });

  it('a job due in 2 s holds no slot while it waits: another job of the limit-1 key runs meanwhile, and it starts after its time', async () => {
    await setup(100);
    const key = 'later';
    const runAt = Date.now() + 2_000;
    await ledger.enqueue({ name: 'sleep', args: { ms: 10 }, key, limit: 1, runAt, jobId: 'due-later' });
    await ledger.enqueue({ name: 'sleep', args: { ms: 300 }, key, limit: 1, jobId: 'now' });
    startWorker('--concurrency', '2');
    const all = await until(runs, (r) => r.filter((x) => x.outcome === 'completed').length >= 2, 'both jobs');
    const now = all.find((r) => r.job_id === 'now')!;
    const later = all.find((r) => r.job_id === 'due-later')!;
    expect(Number(now.ended_ms)).toBeLessThan(runAt);
    expect(Number(later.started_ms)).toBeGreaterThanOrEqual(runAt);
  });

  it('a running job is claimed by no second worker, even one that starts while the first renews nothing: it runs once; the slot is released once', async () => {
    await setup(60_000); // no sweep during the test: the lease (10 s) outlives the handler
    const key = 'claimed-once';
    await ledger.enqueue({ name: 'sleep', args: { ms: 2_500 }, key, limit: 1, leaseMs: 10_000, jobId: 'once' });
    await ledger.enqueue({ name: 'sleep', args: { ms: 10 }, key, limit: 1, leaseMs: 10_000, jobId: 'after' });
    startWorker('--concurrency', '1', '--no-heartbeat');
    await until(runs, (r) => r.length === 1, 'the first run');
    startWorker('--concurrency', '1', '--no-heartbeat');
    const all = await until(runs, (r) => r.filter((x) => x.outcome === 'completed').length >= 2, 'both jobs');
    expect(all.filter((r) => r.job_id === 'once')).toHaveLength(1);
    // The key's next job started only once the first had ended: the limit held across the two processes.
    const [once, after] = ['once', 'after'].map((id) => all.find((r) => r.job_id === id)!);
    expect(Number(after!.started_ms)).toBeGreaterThanOrEqual(Number(once!.ended_ms));
    const events = await eventsOf(key);
    const released = events.filter((e) => e.type === 'SlotReleased').map((e) => e.data.leaseId);
    expect(new Set(released).size).toBe(released.length);
    expect(events.filter((e) => e.type === 'JobStarted' && e.data.jobId === 'once')).toHaveLength(1);
    await foldChecked(key);
  });

  it("revoking a running holder's lease aborts its handler's signal; its worker says it stopped (the slot passes on then), and a later Complete is refused", async () => {
    await setup();
    const key = 'revoked';
    await ledger.enqueue({ name: 'sleep', args: { ms: 5_000 }, key, limit: 1, leaseMs: 1_000, jobId: 'doomed' });
    startWorker('--concurrency', '1');
    await until(runs, (r) => r.length === 1, 'the run to start');
    const revoked = await ledger.execute(keyStream(key), { type: 'RevokeLease', jobId: 'doomed', by: 'e2e', jitter: 0 });
    expect(E.isRight(revoked)).toBe(true);
    const [run] = await until(runs, (r) => r[0]?.outcome === 'aborted', 'the handler to be aborted', 10_000);
    expect(Number(run!.ended_ms) - Number(run!.started_ms)).toBeLessThan(5_000);
    // The worker process's Stopped: the slot goes only now, after the handler returned.
    const events = await until(() => eventsOf(key), (es) => es.some((e) => e.type === 'SlotReleased' && e.data.leaseId === 'doomed:1'), 'the worker to say the handler stopped');
    const released = events.find((e) => e.type === 'SlotReleased' && e.data.leaseId === 'doomed:1')!;
    expect(released.data.reason).toBe('revoked');
    expect(Number(released.data.at)).toBeGreaterThanOrEqual(Number(run!.ended_ms));
    const late = await ledger.execute(keyStream(key), { type: 'Complete', jobId: 'doomed', leaseId: 'doomed:1' });
    expect(E.isLeft(late) && late.left.tag).toBe('StaleLease');
    expect((await eventsOf(key)).filter((e) => e.type === 'JobCompleted')).toEqual([]);
  });
});

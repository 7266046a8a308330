import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import type { JobContext } from '../../src/adapters/worker/define-job.js';
import type { RecordedEvent } from '../../src/domain/ports/event-store.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';

// FAILURE-MODES.md rows about dispatch and claiming, with real workers on real PostgreSQL:
// #11 (one saturated key stalls every other key), #12 (a batched claim hands out more jobs of a
// key than it has slots), #13 (a slot leaked forever by a half-written claim). Each test uses a
// queue of its own, so the workers of one never see another's jobs.

let db: MigratedDatabase;
let ledger: Ledger;
const children: ChildProcess[] = [];

beforeAll(async () => {
  db = await createMigratedDatabase(12, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, sweepIntervalMs: 100, logger: silentLogger });
});

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await ledger.close();
  await db.drop();
});

const eventsOf = (key: string): Promise<RecordedEvent[]> => ledger.store.readStream(keyStream(key));

/** Job ids of the dispatch messages of a key: its jobs holding a slot (waiting to be claimed, or running), in admission order. */
const messagesOf = async (key: string): Promise<string[]> =>
  (await db.pool.query<{ job_id: string }>(`SELECT job_id FROM jl_slots WHERE key = $1 ORDER BY acquired_at, job_id`, [key])).rows.map((r) => r.job_id);

/** The most slots of the key held at once, replaying its events: a slot is held from its admission to its release. */
const mostHeld = (events: readonly RecordedEvent[]): number => {
  const held = new Set<string>();
  let most = 0;
  for (const e of events) {
    if (e.type === 'SlotAcquired' || e.type === 'JobPromoted') held.add(e.data.leaseId as string);
    if (e.type === 'SlotReleased') held.delete(e.data.leaseId as string);
    most = Math.max(most, held.size);
  }
  return most;
};

/** A handler that runs until `open()`: how a job that never finishes (for as long as the test says) is made. */
const gate = () => {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  const entered = new Set<string>();
  return {
    handler: async (_args: unknown, ctx: JobContext) => {
      entered.add(ctx.jobId);
      await opened;
    },
    entered: (jobId: string) => entered.has(jobId),
    open: () => open(),
  };
};

/** A handler that counts how many of its runs overlap; each run yields to the event loop for a few ms of "work". */
const overlapCounter = () => {
  let running = 0;
  let most = 0;
  const ran: string[] = [];
  return {
    handler: async (_args: unknown, ctx: JobContext) => {
      running++;
      most = Math.max(most, running);
      try {
        await new Promise((resolve) => setTimeout(resolve, 5));
      } finally {
        running--;
        ran.push(ctx.jobId);
      }
    },
    most: () => most,
    ran,
  };
};

describe('FAILURE-MODES #11: one saturated key stalls every other key (pg-boss 6e2fed1, Oban partitions)', () => {
  it('a key at its limit, with its holder never finishing and 30 older, more urgent jobs parked, holds up none of 40 jobs of 20 other keys on the same workers', async () => {
    const queue = 'fm11';
    const hot = gate();
    const others = overlapCounter();
    // The saturated key's jobs come first and most urgent: a dispatch that picked by age or
    // priority among all jobs, admitted or not, would pick them first, again and again.
    const hotIds = Array.from({ length: 31 }, (_, i) => `hot-${i}`);
    await ledger.enqueueMany(hotIds.map((jobId) => ({ name: 'hot', key: 'fm11:hot', limit: 1, priority: -10, queue, jobId })));
    const otherIds = Array.from({ length: 40 }, (_, i) => `other-${i}`);
    await ledger.enqueueMany(otherIds.map((jobId, i) => ({ name: 'other', key: `fm11:other-${i % 20}`, limit: 1, queue, jobId })));
    // Only the admitted job of the saturated key is in the dispatch queue.
    expect(await messagesOf('fm11:hot')).toEqual(['hot-0']);

    const workers = [1, 2].map(() => ledger.worker({ queue, concurrency: 3, handlers: { hot: hot.handler, other: others.handler } }));
    for (const w of workers) w.start();
    try {
      await until(async () => hot.entered('hot-0'), Boolean, 'the saturated key\'s holder to start');
      await until(() => ledger.finishedJobs(otherIds), (n) => n === otherIds.length, 'every job of the other keys to finish while the saturated key\'s holder runs', 20_000);
      expect(others.ran.sort()).toEqual([...otherIds].sort());

      // Meanwhile the saturated key kept its one holder and its line, whole.
      const detail = await ledger.keyDetail('fm11:hot');
      expect(detail?.holders.map((h) => h.jobId)).toEqual(['hot-0']);
      expect(detail?.parked).toHaveLength(30);
      expect(await messagesOf('fm11:hot')).toEqual(['hot-0']);
      expect(hotIds.filter((id) => hot.entered(id))).toEqual(['hot-0']);

      hot.open();
      await until(() => ledger.finishedJobs(hotIds), (n) => n === hotIds.length, 'the saturated key\'s jobs to finish once its holder does');
      expect(mostHeld(await eventsOf('fm11:hot'))).toBe(1);
    } finally {
      hot.open();
      await Promise.all(workers.map((w) => w.stop()));
    }
  });
});

describe('FAILURE-MODES #12: a batched claim handed out more jobs of a key than it had slots (graphile-worker #621)', () => {
  it('two workers of 16 handlers each, over 60 jobs of one limit-2 key, never run more than 2 at once, and run them all', async () => {
    const queue = 'fm12';
    const key = 'fm12:narrow';
    const counter = overlapCounter();
    const jobIds = Array.from({ length: 60 }, (_, i) => `narrow-${i}`);
    await ledger.enqueueMany(jobIds.map((jobId) => ({ name: 'narrow', key, limit: 2, queue, jobId })));
    // The queue holds the two admitted jobs, not the line: a read of 16 can hand out only those.
    expect(await messagesOf(key)).toEqual(['narrow-0', 'narrow-1']);

    const workers = [1, 2].map(() => ledger.worker({ queue, concurrency: 16, handlers: { narrow: counter.handler } }));
    for (const w of workers) w.start();
    try {
      await until(() => ledger.finishedJobs(jobIds), (n) => n === jobIds.length, 'every job of the key to finish', 20_000);
    } finally {
      await Promise.all(workers.map((w) => w.stop()));
    }
    expect(counter.ran.sort()).toEqual([...jobIds].sort());
    // Both slots were used (the first two admissions start in one read), never a third.
    expect(counter.most()).toBe(2);
    const events = await eventsOf(key);
    expect(mostHeld(events)).toBe(2);
    expect(events.filter((e) => e.type === 'JobStarted')).toHaveLength(60);
  });
});

describe('FAILURE-MODES #13: a slot leaked forever when a claim was half-written (Hatchet #4494)', () => {
  /** Holds the streams row of `stream` (FOR UPDATE) in a transaction of its own, as a slow writer would. */
  const holdStream = async (stream: string) => {
    const client = await db.pool.connect();
    await client.query('BEGIN');
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid FROM streams WHERE stream = $1 FOR UPDATE', [stream]);
    expect(rows).toHaveLength(1);
    return { client, pid: rows[0]!.pid };
  };

  /** Backends waiting on a lock `pid` holds. */
  const blockedBy = async (pid: number): Promise<number[]> =>
    (await db.pool.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [pid])).rows.map((r) => r.pid);

  it('the admission, its holder and its dispatch message are one transaction: an enqueue killed after writing its events leaves no slot, no holder, no row to claim; rerun, it lands once', async () => {
    const key = 'fm13:admit';
    await ledger.enqueue({ name: 'work', key, limit: 2, queue: 'fm13-admit', jobId: 'admit-0' });
    // The enqueue's transaction writes its events, then waits to write the job's row (its slot and its dispatch message).
    const locker = await db.pool.connect();
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE jl_jobs IN EXCLUSIVE MODE');
    const { rows } = await locker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const lockerPid = rows[0]!.pid;
    let released = false;
    const release = async () => {
      if (released) return;
      released = true;
      await locker.query('ROLLBACK');
      locker.release();
    };
    try {
      const enqueued = ledger.enqueue({ name: 'work', key, limit: 2, queue: 'fm13-admit', jobId: 'admit-1' }).catch((error: unknown) => error);
      const [victim] = await until(() => blockedBy(lockerPid), (pids) => pids.length === 1, 'the enqueue waiting to write the job\'s row', 15_000);
      // Half-written: its events are in the transaction, the job's row is not.
      const { rows: waiting } = await db.pool.query<{ query: string }>('SELECT query FROM pg_stat_activity WHERE pid = $1', [victim]);
      expect(waiting[0]?.query).toMatch(/INSERT INTO jl_jobs/);
      await db.pool.query('SELECT pg_terminate_backend($1)', [victim]);
      // Nothing of it is there: no event, no slot row, no message.
      const events = await eventsOf(key);
      expect(events.filter((e) => e.data.jobId === 'admit-1')).toEqual([]);
      expect((await db.pool.query(`SELECT 1 FROM jl_slots WHERE job_id = 'admit-1'`)).rowCount).toBe(0);
      await release();

      const result = await enqueued;
      expect(result, `the enqueue failed: ${String(result)}`).toMatchObject({ jobId: 'admit-1', status: 'acquired' });
      const after = await eventsOf(key);
      const acquired = after.filter((e) => e.type === 'SlotAcquired' && e.data.jobId === 'admit-1');
      // The slot's event names its holder: there is no count of slots apart from who holds them.
      expect(acquired).toHaveLength(1);
      expect(acquired[0]!.data).toMatchObject({ jobId: 'admit-1', leaseId: expect.any(String) });
      const { rows: slots } = await db.pool.query<{ lease_id: string }>(`SELECT lease_id FROM jl_slots WHERE job_id = 'admit-1'`);
      expect(slots).toEqual([{ lease_id: acquired[0]!.data.leaseId }]);
      expect(await messagesOf(key)).toEqual(['admit-0', 'admit-1']);
    } finally {
      await release();
    }
  });

  it('a claim killed after claiming the job and before starting it: no start recorded, the job is claimed again, runs once on its lease, the slot goes to the next job', async () => {
    const queue = 'fm13-claim';
    const key = 'fm13:claim';
    await ledger.enqueueMany(['claim-1', 'claim-2'].map((jobId) => ({ name: 'work', key, limit: 1, queue, jobId })));
    const [acquired] = (await eventsOf(key)).filter((e) => e.type === 'SlotAcquired');
    const held = await holdStream(keyStream(key));
    const counter = overlapCounter();
    const worker = ledger.worker({ queue, concurrency: 2, handlers: { work: counter.handler } });
    try {
      worker.start();
      // The worker's transaction has claimed the job's row (a row lock) and waits to append JobStarted.
      const [victim] = await until(() => blockedBy(held.pid), (pids) => pids.length === 1, 'the claim waiting to start the job', 15_000);
      const { rows: read } = await db.pool.query<{ status: string }>(`SELECT status FROM jl_jobs WHERE job_id = 'claim-1'`);
      expect(read).toEqual([{ status: 'holding' }]); // its claim changed nothing that is committed
      await db.pool.query('SELECT pg_terminate_backend($1)', [victim]);
      await held.client.query('ROLLBACK');
      held.client.release();

      await until(() => ledger.finishedJobs(['claim-1', 'claim-2']), (n) => n === 2, 'both jobs to run after the killed claim');
    } finally {
      await held.client.query('ROLLBACK').catch(() => undefined);
      await worker.stop();
    }
    expect(counter.ran).toEqual(['claim-1', 'claim-2']);
    const events = await eventsOf(key);
    const starts = events.filter((e) => e.type === 'JobStarted' && e.data.jobId === 'claim-1');
    expect(starts.map((e) => [e.data.leaseId, e.data.attempt])).toEqual([[acquired!.data.leaseId, 1]]);
    expect(events.filter((e) => e.type === 'SlotReleased').map((e) => [e.data.jobId, e.data.reason])).toEqual([
      ['claim-1', 'completed'],
      ['claim-2', 'completed'],
    ]);
    expect(events.some((e) => e.type === 'LeaseExpired')).toBe(false);
    expect(await messagesOf(key)).toEqual([]);
  });

  it('a worker process killed (SIGKILL) holding a slot it claimed: its lease expires, the slot comes back, the next job and the retry run', async () => {
    const queue = 'fm13-kill';
    const key = 'fm13:kill';
    // test/worker/presence-process.mjs: a worker on the built library whose "hang" handler never returns.
    const child = spawn(process.execPath, [new URL('./presence-process.mjs', import.meta.url).pathname, JSON.stringify({ databaseUrl: db.url, queue, presenceIntervalMs: 5_000 })], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(child);
    const { workerId } = JSON.parse(
      await new Promise<string>((resolve, reject) => {
        createInterface({ input: child.stdout! }).once('line', resolve);
        child.once('exit', (code) => reject(new Error(`the worker process exited (${code}) before starting`)));
      }),
    ) as { workerId: string };
    await ledger.enqueueMany(['victim', 'next'].map((jobId) => ({ name: 'hang', key, limit: 1, leaseMs: 1_000, queue, jobId })));
    const startedBy = async () => (await eventsOf(key)).find((e) => e.type === 'JobStarted' && e.data.jobId === 'victim');
    const started = await until(startedBy, (e) => e !== undefined, 'the worker process to start the victim');
    expect(started!.data.workerId).toBe(workerId);
    // The holder in the read model is the one the admission named.
    const [acquired] = (await eventsOf(key)).filter((e) => e.type === 'SlotAcquired');
    const { rows } = await db.pool.query(`SELECT job_id, lease_id FROM jl_slots WHERE key = $1`, [key]);
    expect(rows).toEqual([{ job_id: 'victim', lease_id: acquired!.data.leaseId }]);

    child.kill('SIGKILL');
    await new Promise((resolve) => child.once('exit', resolve));
    ledger.start();
    const ran: [string, number][] = [];
    const worker = ledger.worker({ queue, concurrency: 2, handlers: { hang: async (_args: unknown, ctx: JobContext) => void ran.push([ctx.jobId, ctx.attempt]) } });
    worker.start();
    try {
      await until(() => ledger.finishedJobs(['victim', 'next']), (n) => n === 2, 'the next job and the victim\'s retry to run after the lease expired');
    } finally {
      await worker.stop();
    }
    expect(ran.sort()).toEqual([
      ['next', 1],
      ['victim', 2],
    ]);
    const events = await eventsOf(key);
    expect(events.filter((e) => e.type === 'LeaseExpired').map((e) => e.data.leaseId)).toEqual([started!.data.leaseId]);
    expect(mostHeld(events)).toBe(1);
    expect((await db.pool.query(`SELECT 1 FROM jl_slots WHERE key = $1`, [key])).rowCount).toBe(0);
  });
});

import { spawn, type ChildProcess } from 'node:child_process';
import { hostname } from 'node:os';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { listWorkers, type WorkerRow } from '../../src/adapters/postgres/queries/workers.js';
import { PRESENCE_KEPT_MS } from '../../src/adapters/worker/presence.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';

// Worker presence (issue 12): a worker announces itself, beats, and is marked stopped on a
// graceful stop; a killed one goes gone by itself, and its holders are shown as nobody's; a
// heartbeat that fails never stops the work; rows gone for a day are pruned.

let db: MigratedDatabase;
let ledger: Ledger;
const children: ChildProcess[] = [];

beforeAll(async () => {
  db = await createMigratedDatabase(10, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
});

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await ledger.close();
  await db.drop();
});

const workerRow = async (id: string): Promise<WorkerRow | undefined> => (await listWorkers(db.pool)).find((w) => w.id === id);

/** A handler that runs until released: `release(jobId)` lets it return. */
const gate = () => {
  const waiting = new Map<string, () => void>();
  return {
    handler: (_args: unknown, ctx: { jobId: string }) => new Promise<void>((resolve) => void waiting.set(ctx.jobId, resolve)),
    started: (jobId: string) => waiting.has(jobId),
    release: (jobId: string) => waiting.get(jobId)!(),
  };
};

describe('worker presence', () => {
  it('a worker announces itself with host, pid, queue and concurrency, beats with its running jobs, and is marked stopped (gone) on a graceful stop', async () => {
    const g = gate();
    const worker = ledger.worker({ queue: 'presence-a', concurrency: 3, presenceIntervalMs: 200, handlers: { wait: g.handler } });
    worker.start();
    const first = await until(() => workerRow(worker.workerId), (w) => w !== undefined, 'the worker row');
    expect(first).toMatchObject({ id: worker.workerId, host: hostname(), pid: process.pid, queue: 'presence-a', concurrency: 3, heartbeatMs: 200, state: 'live', stoppedAt: null });

    await ledger.enqueue({ name: 'wait', key: 'presence/a', limit: 2, queue: 'presence-a', jobId: 'pa-1' });
    await until(async () => g.started('pa-1'), Boolean, 'the job to start');
    // The next beats report the running job and move last_seen on.
    const beating = await until(() => workerRow(worker.workerId), (w) => w!.running === 1 && w!.lastSeen > first!.lastSeen, 'a beat with the running job');
    expect(beating).toMatchObject({ state: 'live', holding: 1 });

    g.release('pa-1');
    await worker.stop();
    const stopped = await workerRow(worker.workerId);
    expect(stopped).toMatchObject({ state: 'gone', running: 0, holding: 0, stoppedAt: expect.any(Number) });
  });

  it('a worker killed with SIGKILL goes gone after 3 heartbeats with nothing written; its holder is shown as worker-gone, not live', async () => {
    const child = spawn(process.execPath, [new URL('./presence-process.mjs', import.meta.url).pathname, JSON.stringify({ databaseUrl: db.url, queue: 'presence-k', presenceIntervalMs: 300 })], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    children.push(child);
    const line = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once('line', resolve);
      child.once('exit', (code) => reject(new Error(`the worker process exited (${code}) before starting`)));
    });
    const { workerId } = JSON.parse(line) as { workerId: string };
    await ledger.enqueue({ name: 'hang', key: 'presence/k', limit: 1, queue: 'presence-k', jobId: 'pk-1' });
    const holder = async () => (await ledger.keyDetail('presence/k'))!.holders[0];
    await until(holder, (h) => h?.state === 'running', 'the killed-to-be worker running its job');
    const live = await until(() => workerRow(workerId), (w) => w?.running === 1, 'a beat with the running job');
    expect(live).toMatchObject({ state: 'live', pid: child.pid });
    expect((await ledger.keys()).find((k) => k.key === 'presence/k')?.leaseState).toBe('live');

    child.kill('SIGKILL');
    await new Promise((resolve) => child.once('exit', resolve));
    const gone = await until(() => workerRow(workerId), (w) => w!.state === 'gone', 'the killed worker gone');
    // Nothing was written at its death: no stop, the running count of its last beat.
    expect(gone).toMatchObject({ stoppedAt: null, running: 1, holding: 1 });
    expect(await holder()).toMatchObject({ state: 'worker-gone', leaseState: 'worker-gone', workerId, expiresAt: expect.any(Number) });
    expect((await ledger.keys()).find((k) => k.key === 'presence/k')).toMatchObject({ leaseState: 'worker-gone', holderStates: { running: 0, unstarted: 0, expired: 0, workerGone: 1 } });
  });

  it('a heartbeat that fails never stops the worker nor its jobs; the next beat after the fault writes again', async () => {
    const g = gate();
    const worker = ledger.worker({ queue: 'presence-f', presenceIntervalMs: 200, handlers: { wait: g.handler } });
    worker.start();
    const before = await until(() => workerRow(worker.workerId), (w) => w !== undefined, 'the worker row');
    // Every beat fails while the table is away (a statement error at each beat, as in an outage).
    await db.pool.query('ALTER TABLE workers RENAME TO workers_away');
    try {
      await ledger.enqueue({ name: 'wait', key: 'presence/f', limit: 1, queue: 'presence-f', jobId: 'pf-1' });
      await until(async () => g.started('pf-1'), Boolean, 'the job to start while beats fail');
      g.release('pf-1');
      await until(async () => (await ledger.jobs({ key: 'presence/f' })).jobs[0]?.status, (s) => s === 'completed', 'the job to complete while beats fail');
    } finally {
      await db.pool.query('ALTER TABLE workers_away RENAME TO workers');
    }
    await until(() => workerRow(worker.workerId), (w) => w!.lastSeen > before!.lastSeen && w!.state === 'live', 'a beat after the fault');
    await worker.stop();
  });

  it.each([0, 9, 1.5, Number.NaN])('presenceIntervalMs %s is refused, naming it', (presenceIntervalMs) => {
    expect(() => ledger.worker({ presenceIntervalMs, handlers: {} })).toThrow(expect.objectContaining({ name: 'ValidationError', field: 'presenceIntervalMs' }));
  });

  it('a worker starting prunes the rows of workers gone for a day, and keeps younger ones', async () => {
    const insert = (id: string, agoMs: number) =>
      db.pool.query(
        `INSERT INTO workers (id, host, pid, queue, concurrency, heartbeat_ms, started_at, last_seen, running)
         VALUES ($1, 'old-host', 1, 'presence-p', 1, 5000, now() - $2 * interval '1 millisecond', now() - $2 * interval '1 millisecond', 0)`,
        [id, agoMs],
      );
    await insert('long-gone', PRESENCE_KEPT_MS + 60_000);
    await insert('lately-gone', PRESENCE_KEPT_MS - 60_000);
    const worker = ledger.worker({ queue: 'presence-p', presenceIntervalMs: 1_000, handlers: {} });
    worker.start();
    await until(() => workerRow(worker.workerId), (w) => w !== undefined, 'the worker row');
    const ids = (await listWorkers(db.pool)).map((w) => w.id);
    expect(ids).not.toContain('long-gone');
    expect(ids).toContain('lately-gone');
    await worker.stop();
  });
});

import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { defineJob, type JobContext } from '../../src/adapters/worker/define-job.js';
import type { RecordedEvent } from '../../src/domain/ports/event-store.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// In-process workers on real PostgreSQL: what a handler's outcome records in the ledger.

let db: MigratedDatabase;
let ledger: Ledger;

beforeEach(async () => {
  db = await createMigratedDatabase(10, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, sweepIntervalMs: 100, logger: silentLogger });
});

afterEach(async () => {
  await ledger.close();
  await db.drop();
});

const eventsOf = (key: string): Promise<RecordedEvent[]> => ledger.store.readStream(keyStream(key));

const until = async <T>(probe: () => Promise<T>, done: (t: T) => boolean, what: string, timeoutMs = 20_000): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
};

describe('worker', () => {
  it('an unknown job name fails the job with a clear error, and the worker keeps running', async () => {
    const worker = ledger.worker({ handlers: { known: async () => undefined } });
    worker.start();
    await ledger.enqueue({ name: 'mystery', key: 'unknown', limit: 1, maxAttempts: 1, jobId: 'mystery-1' });
    await ledger.enqueue({ name: 'known', key: 'unknown', limit: 1, jobId: 'known-1' });
    const events = await until(() => eventsOf('unknown'), (es) => es.some((e) => e.type === 'JobCompleted'), 'the known job to complete');
    const failed = events.find((e) => e.type === 'JobFailed');
    expect(failed?.data).toMatchObject({ jobId: 'mystery-1', error: expect.stringContaining('no handler for job name "mystery"') });
    expect(events.some((e) => e.type === 'JobDead' && e.data.jobId === 'mystery-1')).toBe(true);
    await worker.stop();
  });

  it('a throwing handler fails the attempt with its message; retries back off until maxAttempts, then the job is dead', async () => {
    ledger.start();
    const attempts: number[] = [];
    const worker = ledger.worker({
      handlers: {
        boom: async (_args: unknown, ctx: JobContext) => {
          attempts.push(ctx.attempt);
          throw new Error(`boom #${ctx.attempt}`);
        },
      },
    });
    worker.start();
    await ledger.enqueue({ name: 'boom', key: 'boom', limit: 1, maxAttempts: 2, jobId: 'boom-1' });
    const events = await until(() => eventsOf('boom'), (es) => es.some((e) => e.type === 'JobDead'), 'the job to die');
    const failures = events.filter((e) => e.type === 'JobFailed').map((e) => e.data);
    expect(failures.map((f) => [f.attempt, f.error])).toEqual([
      [1, 'boom #1'],
      [2, 'boom #2'],
    ]);
    // the retry was due after its backoff (1 s base, half of it random) and holds no slot meanwhile
    const retryAt = failures[0]!.retryAt as number;
    expect(retryAt - Number(failures[0]!.at)).toBeGreaterThanOrEqual(500);
    const secondStart = events.find((e) => e.type === 'JobStarted' && e.data.attempt === 2)!;
    expect(Number(secondStart.data.at)).toBeGreaterThanOrEqual(retryAt);
    expect(failures[1]!.retryAt).toBeNull();
    expect(attempts).toEqual([1, 2]);
    await worker.stop();
  });

  it('a defined job derives its key and limit from its args', async () => {
    const sync = defineJob<{ tenant: number }>({ name: 'sync', key: (a) => `tenant:${a.tenant}`, limit: 2, maxAttempts: 7, handler: async () => undefined });
    const [a, b, c] = [await ledger.enqueue(sync, { tenant: 1 }), await ledger.enqueue(sync, { tenant: 1 }), await ledger.enqueue(sync, { tenant: 1 })];
    expect([a.status, b.status, c.status]).toEqual(['acquired', 'acquired', 'parked']);
    expect(a.stream).toBe('key:tenant:1');
    const enqueued = (await eventsOf('tenant:1')).find((e) => e.type === 'JobEnqueued');
    expect(enqueued?.data).toMatchObject({ name: 'sync', maxAttempts: 7, args: { tenant: 1 } });
    // an override at the call site wins
    expect((await ledger.enqueue(sync, { tenant: 2 }, { key: 'elsewhere' })).stream).toBe('key:elsewhere');
  });

  it('direct handoff: a worker runs its key\'s next job without a queue message, for handoffSliceMs from the first job\'s start', async () => {
    // The ledger's clock drives the slice: each job "takes" 300 ms of it, so a slice of 1000 ms
    // covers the first job and three handoffs; the fourth promotion goes through the queue.
    let now = Date.UTC(2030, 0, 1);
    const timed = await createLedger({ pool: db.pool, migrate: false, clock: () => now, logger: silentLogger });
    const ran: string[] = [];
    const step = async (_args: unknown, ctx: JobContext) => {
      ran.push(ctx.jobId);
      now += 300;
    };
    const worker = timed.worker({ handlers: { step }, concurrency: 1, handoffSliceMs: 1_000 });
    const jobIds = Array.from({ length: 10 }, (_, i) => `handoff-${i}`);
    try {
      await timed.enqueueMany(jobIds.map((jobId) => ({ name: 'step', key: 'handoff', limit: 1, jobId })));
      worker.start();
      await until(() => timed.finishedJobs(jobIds), (n) => n === jobIds.length, 'every job to finish');
      await worker.stop();
    } finally {
      await timed.close();
    }
    expect(ran).toEqual(jobIds);
    const events = await eventsOf('handoff');
    const handedOff = events
      .filter((e, i) => e.type === 'JobStarted' && events[i - 1]?.type === 'JobPromoted' && events[i - 1]!.position.commit === e.position.commit)
      .map((e) => e.data.jobId);
    expect(handedOff).toEqual(['handoff-1', 'handoff-2', 'handoff-3', 'handoff-5', 'handoff-6', 'handoff-7', 'handoff-9']);
    expect((await ledger.queue.metrics('default')).totalSent).toBe(3);
    // every start was this worker's, one attempt each, and the key is idle at the end
    expect(new Set(events.filter((e) => e.type === 'JobStarted').map((e) => [e.data.workerId, e.data.attempt].join()))).toEqual(new Set([`${worker.workerId},1`]));
    const { state } = await ledger.keyState('handoff');
    expect(state.jobs).toEqual({});
  });

  it('handoffSliceMs 0 turns direct handoff off: every admission goes through the queue', async () => {
    const worker = ledger.worker({ handlers: { step: async () => undefined }, concurrency: 1, handoffSliceMs: 0 });
    const jobIds = ['off-0', 'off-1', 'off-2'];
    await ledger.enqueueMany(jobIds.map((jobId) => ({ name: 'step', key: 'handoff-off', limit: 1, jobId })));
    worker.start();
    await until(() => ledger.finishedJobs(jobIds), (n) => n === jobIds.length, 'every job to finish');
    await worker.stop();
    expect((await ledger.queue.metrics('default')).totalSent).toBe(3);
  });

  it('bad worker options are refused naming the option', () => {
    expect(() => ledger.worker({ handlers: {}, concurrency: 0 })).toThrow(/^concurrency: /);
    expect(() => ledger.worker({ handlers: {}, handoffSliceMs: -1 })).toThrow(/^handoffSliceMs: /);
  });

  it('direct handoff never starts a job of another queue: that one waits for its own worker', async () => {
    const ran: string[] = [];
    const record = async (_args: unknown, ctx: JobContext) => void ran.push(ctx.jobId);
    const first = ledger.worker({ handlers: { step: record }, concurrency: 1 });
    first.start();
    await ledger.enqueueMany([
      { name: 'step', key: 'two-queues', limit: 1, jobId: 'q-default' },
      { name: 'step', key: 'two-queues', jobId: 'q-mail', queue: 'mail' },
    ]);
    await until(() => eventsOf('two-queues'), (es) => es.some((e) => e.type === 'JobPromoted' && e.data.jobId === 'q-mail'), 'the mail job to be promoted');
    const mail = ledger.worker({ handlers: { step: record }, queue: 'mail', concurrency: 1 });
    mail.start();
    await until(() => ledger.finishedJobs(['q-default', 'q-mail']), (n) => n === 2, 'both jobs to finish');
    await Promise.all([first.stop(), mail.stop()]);
    const startedBy = (await eventsOf('two-queues')).flatMap((e) => (e.type === 'JobStarted' ? [[e.data.jobId, e.data.workerId]] : []));
    expect(startedBy).toEqual([
      ['q-default', first.workerId],
      ['q-mail', mail.workerId],
    ]);
  });

  it('a revoked lease aborts its handler at once, not at its next renewal (heartbeat off here: nothing else could tell it)', async () => {
    let aborted: unknown;
    const worker = ledger.worker({
      handlers: { hold: async (_args: unknown, ctx: JobContext) => new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => ((aborted = ctx.signal.reason), resolve()))) },
      heartbeat: false,
    });
    worker.start();
    await ledger.enqueue({ name: 'hold', key: 'revoked-now', limit: 1, leaseMs: 60_000, jobId: 'held' });
    await until(() => eventsOf('revoked-now'), (es) => es.some((e) => e.type === 'JobStarted'), 'the job to start');
    expect(await ledger.release({ key: 'revoked-now', jobId: 'held', by: 'ops' })).toEqual({ released: ['held'] });
    await until(async () => aborted, (reason) => reason !== undefined, 'the handler to be aborted');
    expect(String(aborted)).toContain('held:1 was revoked or expired');
    await worker.stop();
    // its end reported nothing: the ledger shows the revocation and no completion or failure
    const types = (await eventsOf('revoked-now')).map((e) => e.type);
    expect(types).toContain('LeaseRevoked');
    expect(types.filter((t) => t === 'JobCompleted' || t === 'JobFailed')).toEqual([]);
  });

  it('graceful stop lets a running handler finish within the grace period and yields the rest without burning an attempt', async () => {
    const worker = ledger.worker({
      handlers: {
        quick: async () => new Promise((r) => setTimeout(r, 100)),
        slow: async (_args: unknown, ctx: JobContext) => new Promise((r) => ctx.signal.addEventListener('abort', r)),
      },
      concurrency: 2,
    });
    worker.start();
    await ledger.enqueue({ name: 'quick', key: 'graceful-a', limit: 1, jobId: 'quick-1' });
    await ledger.enqueue({ name: 'slow', key: 'graceful-b', limit: 1, jobId: 'slow-1' });
    await until(() => eventsOf('graceful-b'), (es) => es.some((e) => e.type === 'JobStarted'), 'the slow job to start');
    await worker.stop(500);
    expect((await eventsOf('graceful-a')).some((e) => e.type === 'JobCompleted')).toBe(true);
    const slow = await eventsOf('graceful-b');
    expect(slow.map((e) => e.type)).toEqual(expect.arrayContaining(['JobYielded', 'SlotReleased']));
    const { state } = await ledger.keyState('graceful-b');
    // yielded, parked and promoted again at once (the key is free): no attempt counted
    expect(state.jobs['slow-1']).toMatchObject({ status: 'holding', attempts: 0 });
  });
});

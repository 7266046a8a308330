import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { defineJob, type JobContext } from '../../src/adapters/worker/define-job.js';
import { Worker } from '../../src/adapters/worker/worker.js';
import { keyEventId } from '../../src/commands/enqueue.js';
import type { KeyCommand } from '../../src/commands/key-command.js';
import { KeyWriter } from '../../src/commands/key-writer.js';
import { noOutages } from '../../src/domain/ports/outages.js';
import { createDispatcher } from '../../src/projections/dispatcher.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import type { RecordedEvent } from '../../src/domain/ports/event-store.js';
import { silentLogger, type LogFn, type Logger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { BAD_CASES, appendByHand } from '../support/bad-events.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';

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


interface LogLine {
  readonly level: string;
  readonly fields: Record<string, unknown>;
  readonly message: string | undefined;
}

/** A logger that keeps what it is told, with its children's bindings. */
const recordingLogger = (lines: LogLine[], bindings: Record<string, unknown> = {}): Logger => {
  const at =
    (level: string): LogFn =>
    (fieldsOrMessage: object | string, message?: string) =>
      void lines.push(typeof fieldsOrMessage === 'string' ? { level, fields: bindings, message: fieldsOrMessage } : { level, fields: { ...bindings, ...fieldsOrMessage }, message });
  return {
    child: (more) => recordingLogger(lines, { ...bindings, ...more }),
    error: at('error'),
    warn: at('warn'),
    info: at('info'),
    debug: at('debug'),
    trace: at('trace'),
  };
};

describe('worker', () => {
  it('a job no handler here knows is given back: no attempt counted, no slot held while it waits, in the audit and the log; a worker with the handler runs it after the delay', async () => {
    const lines: LogLine[] = [];
    const logged = await createLedger({ pool: db.pool, migrate: false, sweepIntervalMs: 100, logger: recordingLogger(lines) });
    try {
      logged.start();
      const old = logged.worker({ handlers: { known: async () => undefined }, unknownJobDelayMs: 3_000 });
      old.start();
      // maxAttempts 1: had the give-back cost an attempt, the job would be dead.
      await logged.enqueue({ name: 'buildReport', key: 'rolling', limit: 1, maxAttempts: 1, jobId: 'report-1' });
      await logged.enqueue({ name: 'known', key: 'rolling', jobId: 'known-1' });
      await logged.enqueue({ name: 'buildReport', maxAttempts: 1, jobId: 'report-solo' });
      const events = await until(() => eventsOf('rolling'), (es) => es.some((e) => e.type === 'JobCompleted' && e.data.jobId === 'known-1'), 'the known job to take the freed slot and complete');
      const solo = await until(() => logged.audit({ jobId: 'report-solo' }), (a) => a.events.some((e) => e.type === 'JobScheduled'), 'the job without a key to be given back');
      // checked before the delay is up: the job waits, scheduled, holding no slot
      const detail = await logged.keyDetail('rolling');
      const { state } = await logged.keyState('rolling');
      await old.stop();

      const yieldAt = events.findIndex((e) => e.type === 'JobYielded');
      const givenBack = events[yieldAt]!;
      const reason = `no handler for buildReport in worker ${old.workerId}`;
      expect(givenBack.data).toMatchObject({ jobId: 'report-1', leaseId: 'report-1:1', attempts: 0, reason });
      const retryAt = givenBack.data.retryAt as number;
      expect(retryAt - Number(givenBack.data.at)).toBeGreaterThanOrEqual(3_000);
      expect(retryAt - Number(givenBack.data.at)).toBeLessThanOrEqual(3_600);
      // in the same append: the slot goes, the job is scheduled, the parked job takes the slot
      expect(events.slice(yieldAt, yieldAt + 4).map((e) => [e.type, e.data.jobId, e.position.commit])).toEqual([
        ['JobYielded', 'report-1', givenBack.position.commit],
        ['SlotReleased', 'report-1', givenBack.position.commit],
        ['JobScheduled', 'report-1', givenBack.position.commit],
        ['JobPromoted', 'known-1', givenBack.position.commit],
      ]);
      expect(events[yieldAt + 1]!.data.reason).toBe('yielded');
      expect(events[yieldAt + 2]!.data.runAt).toBe(retryAt);
      expect(state.jobs['report-1']).toMatchObject({ status: 'scheduled', attempts: 0, lease: null, runAt: retryAt });
      expect(detail?.holders.map((h) => h.jobId)).not.toContain('report-1');
      expect(detail?.scheduled.map((j) => j.jobId)).toContain('report-1');
      expect(solo.events.map((e) => e.type)).toEqual(['JobEnqueued', 'SlotAcquired', 'JobStarted', 'JobYielded', 'SlotReleased', 'JobScheduled']);
      expect(solo.events[3]!.data).toMatchObject({ attempts: 0, reason: `no handler for buildReport in worker ${old.workerId}` });

      const [first] = (await logged.audit({ key: 'rolling' })).handoffs.filter((h) => h.jobId === 'report-1');
      expect(first).toMatchObject({ reason: 'yielded', attempt: 1, error: `${reason}; offered again at ${new Date(retryAt).toISOString()}` });
      const warning = lines.find((l) => l.level === 'warn' && l.fields.jobId === 'report-1');
      expect(warning?.fields).toMatchObject({ jobName: 'buildReport', known: ['known'] });
      expect(warning?.message).toMatch(/^job report-1: no handler for job name "buildReport" in this worker \(it knows: known\); given back, offered again in \d+ ms$/);

      const ran: { jobId: string; attempt: number; at: number }[] = [];
      const next = logged.worker({ handlers: { buildReport: async (_args: unknown, ctx: JobContext) => void ran.push({ jobId: ctx.jobId, attempt: ctx.attempt, at: Date.now() }) } });
      next.start();
      await until(() => logged.finishedJobs(['report-1', 'report-solo']), (n) => n === 2, 'the new worker to run both jobs');
      await next.stop();
      expect(ran.map((r) => [r.jobId, r.attempt]).sort()).toEqual([
        ['report-1', 1],
        ['report-solo', 1],
      ]);
      expect(ran.find((r) => r.jobId === 'report-1')!.at).toBeGreaterThanOrEqual(retryAt);
      const rerun = (await eventsOf('rolling')).filter((e) => e.type === 'JobStarted' && e.data.jobId === 'report-1').map((e) => [e.data.workerId, e.data.attempt]);
      expect(rerun).toEqual([
        [old.workerId, 1],
        [next.workerId, 1],
      ]);
    } finally {
      await logged.close();
    }
  });

  it('unknownJobs "fail": an unknown job name fails the job with a clear error, and the worker keeps running', async () => {
    const worker = ledger.worker({ handlers: { known: async () => undefined }, unknownJobs: 'fail' });
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

  it('regression: a handler error with a NUL or a lone surrogate in its message is recorded (escaped), not refused by the database and left to its lease', async () => {
    const worker = ledger.worker({
      handlers: {
        odd: async () => {
          throw new Error('bad byte \u0000 and half a pair \ud800');
        },
      },
    });
    worker.start();
    await ledger.enqueue({ name: 'odd', key: 'odd', limit: 1, maxAttempts: 1, jobId: 'odd-1' });
    const events = await until(() => eventsOf('odd'), (es) => es.some((e) => e.type === 'JobDead'), 'the job to be recorded dead', 10_000);
    expect(events.find((e) => e.type === 'JobFailed')?.data.error).toBe('bad byte \\u0000 and half a pair \\ud800');
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
    // The other three went through the queue: claimed by a read, started in a later transaction than their admission.
    expect(events.filter((e) => e.type === 'JobStarted').length - handedOff.length).toBe(3);
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
    const events = await eventsOf('handoff-off');
    const admittedWith = new Map(events.filter((e) => e.type === 'SlotAcquired' || e.type === 'JobPromoted').map((e) => [(e.data as { leaseId: string }).leaseId, e.position.commit]));
    const starts = events.filter((e) => e.type === 'JobStarted');
    expect(starts).toHaveLength(3);
    // Each claimed by a read: started in a transaction after the one that admitted it.
    for (const e of starts) expect(admittedWith.get((e.data as { leaseId: string }).leaseId)).not.toBe(e.position.commit);
  });

  it('bad worker options are refused naming the option', () => {
    expect(() => ledger.worker({ handlers: {}, concurrency: 0 })).toThrow(/^concurrency: /);
    expect(() => ledger.worker({ handlers: {}, handoffSliceMs: -1 })).toThrow(/^handoffSliceMs: /);
    expect(() => ledger.worker({ handlers: {}, unknownJobs: 'skip' as 'fail' })).toThrow(/^unknownJobs: must be one of give-back, fail/);
    expect(() => ledger.worker({ handlers: {}, unknownJobDelayMs: 0 })).toThrow(/^unknownJobDelayMs: /);
    expect(() => ledger.worker({ handlers: {}, unknownJobDelayMs: 1.5 })).toThrow(/^unknownJobDelayMs: /);
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

  it('issue 21 #6: a job no worker knows is given back a bounded while, then dead ("no worker knows <name>"), on the failed list, and runs once retried where a worker knows it', async () => {
    ledger.start();
    const old = ledger.worker({ handlers: { known: async () => undefined }, unknownJobDelayMs: 100, unknownJobDeadAfterMs: 600, pollIntervalMs: 50 });
    old.start();
    await ledger.enqueue({ name: 'newJob', key: 'no-worker-knows', limit: 1, maxAttempts: 1, jobId: 'orphan' });
    await ledger.enqueue({ name: 'known', key: 'no-worker-knows', jobId: 'known-after' });
    const dead = await until(() => ledger.jobs({ key: 'no-worker-knows', status: 'dead' }), (p) => p.jobs.length === 1, 'the job no worker knows to die');
    await old.stop();
    expect(dead.jobs[0]).toMatchObject({ jobId: 'orphan', attempts: 0, finishReason: expect.stringMatching(/^no worker knows newJob: given back \d+ times over \d+ s$/) });
    const events = await eventsOf('no-worker-knows');
    const yields = events.filter((e) => e.type === 'JobYielded' && e.data.jobId === 'orphan');
    expect(yields.length).toBeGreaterThanOrEqual(2);
    // Each give-back held no slot while it waited: the known job ran meanwhile.
    expect(events.some((e) => e.type === 'JobCompleted' && e.data.jobId === 'known-after')).toBe(true);
    // A worker of the newer release knows it: the retry runs it.
    const ran: string[] = [];
    const newer = ledger.worker({ handlers: { newJob: async (_args: unknown, ctx: JobContext) => void ran.push(ctx.jobId) } });
    newer.start();
    await ledger.retry({ jobIds: ['orphan'], by: 'ops' });
    await until(async () => ran, (r) => r.length === 1, 'the retried job to run');
    await newer.stop();
    expect(ran).toEqual(['orphan']);
  });

  it('issue 21 #9: a Yield that fails at shutdown is logged, never an unhandled rejection that ends the process mid-stop', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      // The ledger's own wiring, with a writer whose Yields fail (the database went away as the worker stopped).
      const store = new PostgresEventStore(db.pool, { inline: [createReadModelProjections(), createDispatcher()] });
      const writer = new KeyWriter(store, store, { logger: silentLogger, eventId: keyEventId });
      const failing = {
        executeMany: (items: readonly KeyCommand[]) => (items.some((i) => i.command.type === 'Yield') ? Promise.reject(new Error('the database went away')) : writer.executeMany(items)),
        readAndStart: writer.readAndStart.bind(writer),
      };
      const deps = { writer: failing, queue: ledger.queue, db: db.pool, directHandoff: true, watchLostLeases: () => ({ stop: async () => undefined }), clock: Date.now, random: Math.random, outages: noOutages };
      // Its handler ignores the abort: at stop it is yielded, and the Yield fails.
      const worker = new Worker(deps, silentLogger, { handlers: { stuck: () => new Promise(() => undefined) }, graceMs: 50, pollIntervalMs: 50 });
      worker.start();
      await ledger.enqueue({ name: 'stuck', key: 'stuck-at-stop', limit: 1, jobId: 'stuck-1' });
      await until(async () => worker.active, (n) => n === 1, 'the handler to run');
      await expect(worker.stop()).resolves.toBeUndefined();
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('issue 21 #9: a stopped worker is let go by the ledger (it kept every worker it ever made)', async () => {
    const made = (ledger as unknown as { made: Set<unknown> }).made;
    for (let i = 0; i < 3; i++) {
      const worker = ledger.worker({ handlers: {} });
      worker.start();
      await worker.stop();
    }
    expect(made.size).toBe(0);
  });

  it('issue 21 #1: a revoked lease aborts its handler at once (not at its next renewal; heartbeat off here: nothing else could tell it), and its slot passes on only once the handler returned', async () => {
    let aborted: unknown;
    let returnedAt = 0;
    const worker = ledger.worker({
      handlers: {
        // It takes 300 ms to wind down after the abort: the parked job must not start meanwhile.
        hold: async (_args: unknown, ctx: JobContext) =>
          new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => ((aborted = ctx.signal.reason), setTimeout(() => ((returnedAt = Date.now()), resolve()), 300)))),
        next: async () => undefined,
      },
      heartbeat: false,
    });
    worker.start();
    await ledger.enqueue({ name: 'hold', key: 'revoked-now', limit: 1, leaseMs: 60_000, jobId: 'held' });
    await ledger.enqueue({ name: 'next', key: 'revoked-now', jobId: 'waiting' });
    await until(() => eventsOf('revoked-now'), (es) => es.some((e) => e.type === 'JobStarted'), 'the job to start');
    expect(await ledger.release({ key: 'revoked-now', jobId: 'held', by: 'ops' })).toEqual({ released: ['held'], stopping: ['held'] });
    await until(async () => aborted, (reason) => reason !== undefined, 'the handler to be aborted');
    expect(String(aborted)).toContain('held:1 was revoked or expired');
    const events = await until(() => eventsOf('revoked-now'), (es) => es.some((e) => e.type === 'JobCompleted' && e.data.jobId === 'waiting'), 'the parked job to run');
    await worker.stop();
    // The worker said the handler stopped (Stopped: SlotReleased revoked, the retry, the promotion), after it returned.
    const released = events.find((e) => e.type === 'SlotReleased' && e.data.jobId === 'held')!;
    expect(released.data).toMatchObject({ reason: 'revoked' });
    expect(Number(released.data.at)).toBeGreaterThanOrEqual(returnedAt);
    const promoted = events.find((e) => e.type === 'JobPromoted' && e.data.jobId === 'waiting')!;
    expect(promoted.revision).toBe(released.revision + 2);
    expect(events.filter((e) => e.type === 'JobCompleted' || e.type === 'JobFailed').map((e) => e.data.jobId)).toEqual(['waiting']);
  });

  it('issue 21 #1: cancelling a running job of a limit-1 key never lets a second handler start beside it; the job ends cancelled, once its handler returned', async () => {
    const running = new Set<string>();
    let most = 0;
    const handler = (windDownMs: number) => async (_args: unknown, ctx: JobContext) => {
      running.add(ctx.jobId);
      most = Math.max(most, running.size);
      try {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 5_000);
          ctx.signal.addEventListener('abort', () => (clearTimeout(timer), setTimeout(resolve, windDownMs)));
        });
      } finally {
        running.delete(ctx.jobId);
      }
    };
    // Two handler slots, so only the ledger stands between the parked job and a second handler.
    const worker = ledger.worker({ handlers: { long: handler(400), short: async () => undefined }, concurrency: 2 });
    worker.start();
    await ledger.enqueue({ name: 'long', key: 'cancel-running', limit: 1, jobId: 'c-running' });
    await ledger.enqueue({ name: 'short', key: 'cancel-running', jobId: 'c-parked' });
    await until(() => eventsOf('cancel-running'), (es) => es.some((e) => e.type === 'JobStarted'), 'the first job to start');
    expect(await ledger.cancel({ jobId: 'c-running', by: 'ops' })).toEqual({ cancelled: true, stopping: true });
    const events = await until(() => eventsOf('cancel-running'), (es) => es.some((e) => e.type === 'JobCompleted' && e.data.jobId === 'c-parked'), 'the parked job to run');
    await worker.stop();
    expect(most).toBe(1);
    // From the cancel on, and nothing after: the cancelled job is never retried.
    const from = events.findIndex((e) => e.type === 'LeaseRevoked');
    expect(events.slice(from).map((e) => `${e.type} ${String(e.data.jobId)}`)).toEqual([
      'LeaseRevoked c-running',
      'JobCancelled c-running',
      'SlotReleased c-running',
      'JobPromoted c-parked',
      'JobStarted c-parked',
      'JobCompleted c-parked',
      'SlotReleased c-parked',
    ]);
    expect((await ledger.jobs({ key: 'cancel-running', status: 'cancelled' })).jobs.map((j) => j.jobId)).toEqual(['c-running']);
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

// Issue 10 part 6 as measured: a worker and the sweeper over ten keys, one of which has an event
// appended by hand that does not decode. Then "0 of 9 jobs on healthy keys ran"; now they all run,
// and the broken key's job waits, claimed once, not over and over.
describe('a key with an event that does not decode', () => {
  it.each(BAD_CASES)("regression (issue 10: 0 of 9 jobs on healthy keys ran): with an event of %s on one key, a worker runs the 9 healthy keys' jobs; the broken key's job waits, claimed once", async (bad) => {
    await ledger.enqueue({ name: 'w', key: 'broken', limit: 1, jobId: 'broken-1' });
    const placed = await appendByHand(db.pool, keyStream('broken'), bad);
    for (let i = 0; i < 9; i++) await ledger.enqueue({ name: 'w', key: `healthy-${i}`, limit: 1, jobId: `healthy-${i}` });
    const ran: string[] = [];
    ledger.start();
    const worker = ledger.worker({ handlers: { w: async (_args, ctx) => void ran.push(ctx.jobId) } });
    worker.start();
    try {
      await until(async () => ran.length, (n) => n >= 9, 'the healthy jobs to run');
      // A claim row-locks the job's row: xmax names the last transaction that locked it. Claimed, and then left alone
      // for long enough that a worker claiming it again at once would have done so many times.
      const locker = async () => (await db.pool.query<{ xmax: string; status: string }>(`SELECT xmax::text, status FROM jl_jobs WHERE job_id = 'broken-1'`)).rows[0]!;
      const first = await locker();
      expect(first.status).toBe('holding');
      expect(first.xmax).not.toBe('0');
      await new Promise((r) => setTimeout(r, 1_000));
      expect(ran.sort()).toEqual(Array.from({ length: 9 }, (_, i) => `healthy-${i}`).sort());
      expect(await locker()).toEqual(first);
      const broken = (await ledger.keys()).find((k) => k.key === 'broken');
      expect(broken?.quarantine).toMatchObject({ revision: placed.revision, readers: ['writer'] });
    } finally {
      await worker.stop();
    }
  });
});

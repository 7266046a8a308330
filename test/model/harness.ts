import pg from 'pg';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import type { JobContext } from '../../src/adapters/worker/define-job.js';
import type { Worker } from '../../src/adapters/worker/worker.js';
import type { Logger } from '../../src/domain/ports/logger.js';
import { keyStream, queueCapKey } from '../../src/domain/streams.js';
import { appendByHand, fixByHand, type Placed } from '../support/bad-events.js';
import { checkRun, type HandlerRun, type ModelWorld, type Violation } from './checks.js';
import { Rng } from './random.js';

// The model-based, multi-process checker (issue 21): several Ledgers on one database, each with
// its own pool, key writer and cache of key states, as separate processes have; real workers
// whose handlers record when they start and end; and a seeded random mix of what users and
// operators do to them, several at once: enqueues (keys, stacked limits, queue caps, each
// whenFull, jobs no worker knows, jobs due later, jobs that fail), cancels of scheduled, parked
// and running jobs, releases, pauses and resumes, retries and discards of dead jobs from two
// ledgers at once, a malformed event put into a stream (and fixed later), dropped connections,
// leases left to lapse (a worker without heartbeat). Then, with every sweeper stopped and the
// ledger quiet, checkRun (./checks.ts) judges the run from the handlers' records and the ledger
// alone.
//
// What a seed fixes: the world, the operations, which ledger runs each, and the pauses between
// them. What it cannot fix: how PostgreSQL and the event loop interleave them (the ledgers share
// a real server), so a seed reproduces a run's inputs, and a failure it found is usually, not
// always, found again by its seed. That is why the long run tries hundreds of seeds.

/** The limits of the world every run lives in (the checker judges by these, not by what the ledger recorded). */
export const WORLD: ModelWorld = {
  keys: { k1: 1, k2: 2 },
  limitKeys: { l1: 1 },
  queueCaps: { q1: 2 },
  giveBackDeadAfterMs: 1_500,
};

export interface ModelOptions {
  readonly databaseUrl: string;
  readonly seed: number;
  /** Operations in the run (default 90). */
  readonly operations?: number;
  /** Ledgers, as processes (default 3; at least 2). */
  readonly ledgers?: number;
}

export interface ModelResult {
  readonly seed: number;
  readonly violations: readonly Violation[];
  readonly stats: Readonly<Record<string, number>>;
  /** What the run did, one line per operation and outcome: printed with a failure. */
  readonly log: readonly string[];
}

const QUEUES = ['q1', 'q2'] as const;
/** q2's jobs have the shortest lease there is: a worker without a heartbeat lets them lapse. */
const LEASE_MS = { q1: 3_000, q2: 1_000 } as const;
const GIVE_BACK_DELAY_MS = 200;

/** Errors an operation may meet in a run (a refusal, a key gone quarantined, a dropped connection); anything else is a violation. */
const EXPECTED_ERRORS = new Set([
  'RefusedError',
  'LimitConflictError',
  'UnknownJobError',
  'UnknownKeyError',
  'EventDecodeError',
  'ConflictRetriesExhaustedError',
  'TransientWriteError',
  'QueueCapConflictError',
]);
const isConnectionLoss = (e: unknown): boolean =>
  e instanceof Error && /terminat|Connection terminated|ECONNRESET|connection.*(closed|ended)|57P01|Client has encountered a connection error/i.test(`${e.message} ${(e as { code?: string }).code ?? ''}`);

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A handler's sleep that ends early, throwing, when its run is aborted. */
const work = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });

/** Logs kept only as counts of errors (a run logs a lot; the checker judges by the ledger). */
const countingLogger = (counts: Map<string, number>): Logger => {
  const logger: Logger = {
    child: () => logger,
    error: (a: object | string, b?: string) => void counts.set(`error: ${typeof a === 'string' ? a : b ?? ''}`.slice(0, 120), (counts.get(`error: ${typeof a === 'string' ? a : b ?? ''}`.slice(0, 120)) ?? 0) + 1),
    warn: () => undefined,
    info: () => undefined,
    debug: () => undefined,
    trace: () => undefined,
  };
  return logger;
};

interface Job {
  readonly jobId: string;
  readonly name: 'work' | 'ghost';
  readonly key: string | null;
  readonly limits: readonly string[];
  readonly queue: (typeof QUEUES)[number];
}

export const runModel = async (options: ModelOptions): Promise<ModelResult> => {
  const rng = new Rng(options.seed);
  const nLedgers = Math.max(2, options.ledgers ?? 3);
  const operations = options.operations ?? 90;
  const log: string[] = [];
  const note = (line: string) => log.push(`${String(Date.now() % 100_000).padStart(5, '0')} ${line}`);
  const violations: Violation[] = [];
  const errorLog = new Map<string, number>();
  const admin = new pg.Pool({ connectionString: options.databaseUrl, max: 3, application_name: 'model-admin' });
  admin.on('error', () => undefined);
  const pools: pg.Pool[] = [];
  const ledgers: Ledger[] = [];
  const workers: { ledger: number; worker: Worker; heartbeat: boolean }[] = [];
  const runs: HandlerRun[] = [];
  let seq = 0;
  let running = 0;
  const jobs: Job[] = [];
  const inFlight = new Set<Promise<void>>();
  const poisoned = new Map<string, Placed>();
  const paused = new Set<string>();
  const stats: Record<string, number> = {};
  const count = (what: string) => void (stats[what] = (stats[what] ?? 0) + 1);

  const handlers = (workerLabel: string, heartbeat: boolean) => ({
    work: async (args: { ms: number; fail: boolean }, ctx: JobContext) => {
      const run: HandlerRun = { jobId: ctx.jobId, leaseId: ctx.leaseId, worker: workerLabel, heartbeat, startMs: Date.now(), startSeq: ++seq, endMs: null, endSeq: null, outcome: null };
      runs.push(run);
      running++;
      try {
        await work(args.ms, ctx.signal);
        if (args.fail) {
          run.outcome = 'failed';
          throw new Error('the job failed, as its args asked');
        }
        run.outcome = 'completed';
      } catch (error) {
        run.outcome ??= ctx.signal.aborted ? 'aborted' : 'failed';
        throw error;
      } finally {
        run.endMs = Date.now();
        run.endSeq = ++seq;
        running--;
      }
    },
  });

  try {
    for (let i = 0; i < nLedgers; i++) {
      const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 6, pipeline: true, application_name: `model-${i}` } as pg.PoolConfig);
      pool.on('error', () => undefined);
      pools.push(pool);
      const random = rng.fork();
      // Ledger 1 is a process opened without the queue caps (a producer, `serve`, a one-off CLI
      // enqueue): the caps the others recorded hold for its jobs too.
      const ledger = await createLedger({
        pool,
        migrate: i === 0,
        sweepIntervalMs: 100,
        logger: countingLogger(errorLog),
        random: () => random.next(),
        ...(i === 1 ? {} : { queues: Object.fromEntries(Object.entries(WORLD.queueCaps).map(([q, n]) => [q, { maxConcurrent: n }])) }),
      });
      ledgers.push(ledger);
      // Two sweepers contend for the lead, as two processes' would.
      if (i < 2) ledger.start();
      for (const queue of QUEUES) {
        // The last ledger's q2 worker renews no lease: its long jobs lapse, and the slot passes on.
        const heartbeat = !(i === nLedgers - 1 && queue === 'q2');
        const label = `L${i}/${queue}`;
        const worker = ledger.worker({ queue, handlers: handlers(label, heartbeat), concurrency: queue === 'q1' ? 3 : 2, heartbeat, unknownJobDelayMs: GIVE_BACK_DELAY_MS, unknownJobDeadAfterMs: WORLD.giveBackDeadAfterMs, pollIntervalMs: 200, graceMs: 500, workerId: label });
        worker.start();
        workers.push({ ledger: i, worker, heartbeat });
      }
    }

    /** Runs an operation in the background, noting how it ended; an unexpected error is a violation. */
    const fire = (what: string, op: () => Promise<unknown>): Promise<void> => {
      const p: Promise<void> = op().then(
        (result) => void note(`${what} -> ${JSON.stringify(result)?.slice(0, 160)}`),
        (error: unknown) => {
          const name = error instanceof Error ? error.name : typeof error;
          note(`${what} !! ${name}: ${error instanceof Error ? error.message.slice(0, 160) : String(error)}`);
          if (!EXPECTED_ERRORS.has(name) && !isConnectionLoss(error)) violations.push({ check: 'operation', message: `${what} threw ${name}: ${error instanceof Error ? error.message : String(error)}` });
        },
      );
      inFlight.add(p);
      void p.finally(() => inFlight.delete(p));
      return p;
    };

    const someLedger = () => rng.int(0, nLedgers - 1);
    const otherLedger = (than: number) => (than + rng.int(1, nLedgers - 1)) % nLedgers;
    const rows = async <T extends pg.QueryResultRow>(sql: string, values: unknown[] = []): Promise<T[]> => (await admin.query<T>(sql, values)).rows;

    const enqueue = () => {
      const n = jobs.length;
      const keyed = rng.chance(0.8);
      const key = keyed ? rng.pick(Object.keys(WORLD.keys)) : null;
      const limits = keyed && rng.chance(0.35) ? Object.keys(WORLD.limitKeys) : [];
      const queue = rng.chance(0.6) ? 'q1' : 'q2';
      const name = rng.chance(0.08) ? 'ghost' : 'work';
      const job: Job = { jobId: `j${n}`, name, key, limits, queue };
      jobs.push(job);
      const whenFull = keyed ? rng.weighted({ park: 6, reject: 3, replace: 1 }) : 'park';
      // q2's long jobs outlive their 1 s lease: on the worker without a heartbeat they lapse.
      const ms = rng.weighted({ 10: 3, 60: 4, 250: 3, 1_500: queue === 'q2' ? 4 : 1 });
      const input = {
        jobId: job.jobId,
        name,
        args: { ms: Number(ms), fail: rng.chance(0.2) },
        queue,
        priority: rng.int(0, 2),
        maxAttempts: rng.int(1, 3),
        ...(key === null ? { leaseMs: LEASE_MS[queue] } : { key, limit: WORLD.keys[key]!, leaseMs: LEASE_MS[queue], whenFull }),
        ...(limits.length > 0 ? { limits: limits.map((k) => ({ key: k, limit: WORLD.limitKeys[k]! })) } : {}),
        ...(rng.chance(0.1) ? { delayMs: rng.int(50, 600) } : {}),
      };
      // Mostly the key's own producer (a process per tenant), so each ledger writes its keys last
      // and trusts its copy of them, while the limit keys are shared: the stale reads of item 4.
      const home = key === null ? someLedger() : Object.keys(WORLD.keys).indexOf(key) % nLedgers;
      const at = rng.chance(0.75) ? home : someLedger();
      count('enqueue');
      return fire(`L${at} enqueue ${JSON.stringify(input)}`, () => ledgers[at]!.enqueue(input));
    };

    const cancel = async () => {
      // Running jobs half the time: the case a cancel must not let a second handler start beside.
      const runningIds = (await rows<{ job_id: string }>(`SELECT job_id FROM jl_slots WHERE worker_id IS NOT NULL`)).map((r) => r.job_id);
      const pool = runningIds.length > 0 && rng.chance(0.6) ? runningIds : jobs.map((j) => j.jobId);
      if (pool.length === 0) return;
      const jobId = rng.pick(pool);
      const at = someLedger();
      count('cancel');
      return fire(`L${at} cancel ${jobId}`, () => ledgers[at]!.cancel({ jobId, by: `op${at}` }));
    };

    const release = async () => {
      const key = rng.pick([...Object.keys(WORLD.keys), ...Object.keys(WORLD.limitKeys)]);
      const holders = (await rows<{ job_id: string }>(`SELECT job_id FROM jl_slots WHERE key = $1 AND worker_id IS NOT NULL`, [key])).map((r) => r.job_id);
      const one = holders.length > 0 && rng.chance(0.5) ? rng.pick(holders) : undefined;
      const at = someLedger();
      count('release');
      return fire(`L${at} release ${key} ${one ?? '(all)'}`, () => ledgers[at]!.release({ key, by: `op${at}`, ...(one === undefined ? {} : { jobId: one }) }));
    };

    const pauseOrResume = () => {
      const key = rng.pick(Object.keys(WORLD.keys));
      const at = someLedger();
      count('pause/resume');
      if (paused.has(key)) {
        paused.delete(key);
        return fire(`L${at} resume ${key}`, () => ledgers[at]!.resume({ key, by: `op${at}` }));
      }
      paused.add(key);
      return fire(`L${at} pause ${key}`, () => ledgers[at]!.pause({ key, by: `op${at}` }));
    };

    const retryOrDiscardDead = async () => {
      const dead = (await rows<{ job_id: string }>(`SELECT job_id FROM jl_jobs WHERE status = 'dead'`)).map((r) => r.job_id);
      if (dead.length === 0) return;
      const jobId = rng.pick(dead);
      // Two operators at once, from two processes, on the same dead job.
      const a = someLedger();
      const b = otherLedger(a);
      const [first, second] = [rng.pick(['retry', 'discard'] as const), rng.pick(['retry', 'discard'] as const)];
      count('retry/discard');
      const act = (at: number, what: 'retry' | 'discard') =>
        fire(`L${at} ${what} dead ${jobId}`, () => (what === 'retry' ? ledgers[at]!.retry({ jobIds: [jobId], by: `op${at}` }) : ledgers[at]!.discardDead({ jobIds: [jobId], by: `op${at}` })));
      await Promise.all([act(a, first), act(b, second)]);
    };

    const poison = async () => {
      const stream = rng.pick([...Object.keys(WORLD.keys), ...Object.keys(WORLD.limitKeys), queueCapKey('q1')].map(keyStream));
      if (poisoned.has(stream)) return;
      // A stream not written yet has nothing to poison.
      const placed = await appendByHand(admin, stream, 'an unknown type').catch((error: unknown) => {
        if (error instanceof Error && error.message === `no stream ${stream}`) return undefined;
        throw error;
      });
      if (placed === undefined) return;
      count('poison');
      poisoned.set(stream, placed);
      note(`poisoned ${stream} at ${placed.revision}`);
      // Fixed later, as an operator (or the next release) would: it becomes an event that changes nothing.
      const fixAfter = rng.int(300, 4_500);
      const p = sleep(fixAfter).then(() => fix(stream));
      inFlight.add(p);
      void p.finally(() => inFlight.delete(p));
    };

    const fix = async (stream: string) => {
      const placed = poisoned.get(stream);
      if (placed === undefined) return;
      poisoned.delete(stream);
      await fixByHand(admin, placed);
      note(`fixed ${stream} at ${placed.revision}`);
    };

    // Retention mid-flight: the events of jobs finished a moment ago leave the live table row by
    // row (--exact) while flushes, workers and readers go on; by week it finds no week ended (every
    // row is this week's) and only makes the weeks. Every check reads both tables afterwards.
    const archive = () => {
      const at = someLedger();
      const exact = rng.chance(0.8);
      const before = Date.now() - rng.int(0, 2_000);
      count('archive');
      return fire(`L${at} archive${exact ? ' --exact' : ''} --before ${before}`, () => ledgers[at]!.archive({ before, exact, streamsPerBatch: rng.int(1, 20) }));
    };

    const dropConnections = async () => {
      const at = someLedger();
      count('drop connections');
      const killed = await rows(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()`, [`model-${at}`]);
      note(`dropped ${killed.length} connections of L${at}`);
    };

    for (let i = 0; i < operations; i++) {
      const kind = rng.weighted({ enqueue: 50, cancel: 10, release: 5, pause: 5, dead: 8, poison: 2, drop: 2, archive: 2 });
      // Up to eight operations in flight: a ninth waits for one of them.
      while (inFlight.size >= 8) await Promise.race(inFlight);
      switch (kind) {
        case 'enqueue':
          void enqueue();
          break;
        case 'cancel':
          await cancel();
          break;
        case 'release':
          await release();
          break;
        case 'pause':
          void pauseOrResume();
          break;
        case 'dead':
          void retryOrDiscardDead();
          break;
        case 'poison':
          await poison();
          break;
        case 'drop':
          await dropConnections();
          break;
        case 'archive':
          void archive();
          break;
      }
      await sleep(rng.int(0, 60));
    }

    // Settle: what is in flight ends; every poisoned stream is fixed and every paused key resumed;
    // then every sweeper stops, and the ledger is left to go quiet on its writers and workers alone.
    while (inFlight.size > 0) await Promise.all(inFlight);
    for (const stream of [...poisoned.keys()]) await fix(stream);
    for (const key of paused) await ledgers[0]!.resume({ key, by: 'settle' }).catch(() => undefined);
    // The sweeper ends a quarantine once its stream decodes (and serves the lines that waited on it): let it, then stop it.
    const clearBy = Date.now() + 10_000;
    while (Date.now() < clearBy && (await rows(`SELECT 1 FROM jl_quarantined`)).length > 0) await sleep(100);
    await sleep(500);
    for (const ledger of ledgers) await ledger.stop();
    const quiet = await untilQuiet(admin, () => running, ledgers);
    if (!quiet) violations.push({ check: 'quiet', message: 'the ledger never went quiet with the sweepers stopped (something loops)' });

    violations.push(...(await checkRun({ pool: admin, world: WORLD, runs, phase: 'quiet' })));
  } finally {
    for (const ledger of ledgers) await ledger.close().catch((e: unknown) => note(`close failed: ${String(e)}`));
    for (const pool of pools) await pool.end().catch(() => undefined);
  }
  try {
    violations.push(...(await checkRun({ pool: admin, world: WORLD, runs, phase: 'final', databaseUrl: options.databaseUrl })));
    // What the run reached, from the ledger: the paths the checks speak of.
    const { rows } = await admin.query<{ what: string; n: number }>(
      `SELECT CASE WHEN type = 'LeaseRevoked' AND data ? 'cancel' THEN 'cancel of a running job' WHEN type = 'JobDead' AND data->>'reason' LIKE 'no worker knows%' THEN 'dead: no worker knows' ELSE type END AS what, count(*)::int AS n
       FROM events WHERE type IN ('LeaseRevoked', 'LeaseExpired', 'JobRejected', 'JobDead', 'DeadDiscarded', 'JobRetried', 'LimitHeld', 'ParkedReplaced') GROUP BY 1`,
    );
    for (const r of rows) stats[r.what] = r.n;
    stats['archived events'] = (await admin.query<{ n: number }>(`SELECT count(*)::int AS n FROM events_archive`)).rows[0]!.n;
    // A failing seed rarely fails again (its interleaving is not replayed): so that one failure is
    // enough to find the cause, the log ends with the ledger's story of each job a violation names.
    for (const jobId of new Set(violations.flatMap((v) => /^(j\d+)\b/.exec(v.message)?.[1] ?? []))) {
      const { rows: story } = await admin.query<{ line: string }>(
        `SELECT lpad(((data->>'at')::bigint % 100000)::text, 5, '0') || ' ' || stream || '@' || stream_revision || ' xid ' || transaction_id || ' ' || type || ' ' || (data - 'jobId' - 'at')::text || coalesce(' by ' || (metadata->>'by'), '') || coalesce(' worker ' || (metadata->>'workerId'), '') AS line
         FROM ledger_events WHERE data->>'jobId' = $1 ORDER BY transaction_id, global_position`,
        [jobId],
      );
      note(`ledger of ${jobId}:\n  ${story.map((r) => r.line).join('\n  ')}`);
      for (const run of runs.filter((r) => r.jobId === jobId)) note(`handler of ${jobId}: ${JSON.stringify({ ...run, startMs: run.startMs % 100_000, endMs: run.endMs === null ? null : run.endMs % 100_000 })}`);
    }
    const { rows: grace } = await admin.query<{ stream: string; since: string }>(`SELECT stream, (since_ms % 100000)::text AS since FROM jl_lease_grace ORDER BY stream`);
    if (violations.length > 0 && grace.length > 0) note(`lease grace: ${grace.map((g) => `${g.stream} since ${g.since}`).join(', ')}`);
  } finally {
    await admin.end();
  }
  for (const [line, n] of errorLog) note(`logged ${n}x ${line}`);
  return { seed: options.seed, violations, stats: { ...stats, handlerRuns: runs.length, jobs: jobs.length }, log };
};

/** Waits until no handler runs and the ledger's last position stays put for a while (at most 30 s); false if it never does. */
const untilQuiet = async (admin: pg.Pool, running: () => number, ledgers: readonly Ledger[]): Promise<boolean> => {
  const deadline = Date.now() + 30_000;
  let last = '';
  let still = 0;
  while (Date.now() < deadline) {
    await Promise.all(ledgers.map((l) => l.drain()));
    const { rows } = await admin.query<{ p: string | null }>('SELECT max(position)::text AS p FROM appends');
    const now = `${rows[0]!.p}`;
    if (now === last && running() === 0) {
      if (++still >= 8) return true;
    } else still = 0;
    last = now;
    await sleep(250);
  }
  return false;
};

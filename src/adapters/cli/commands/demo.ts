import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Command } from 'commander';
import ms from 'ms';
import type { Handoff } from '../../../domain/audit.js';
import { keyStream } from '../../../domain/streams.js';
import type { Ledger } from '../../ledger.js';
import type { JobStatus } from '../../postgres/queries/list-jobs.js';
import type { JobContext } from '../../worker/define-job.js';
import { withLedger, type CommandContext } from '../context.js';
import { UsageError } from '../errors.js';
import { print, table } from '../output.js';
import { integer } from '../parse.js';

// `jobledger demo`: a realistic workload on the ledger, in this process: some 300 jobs over a dozen
// keys with limits 1-3, two workers, the sweeper, handlers that fail once and are retried, a job
// scheduled for later, and a worker that "crashes" right after starting a job, so that job's
// lease expires and the sweeper hands the slot on. At the end: per key, the jobs, the largest
// number of handlers that really ran at once (timed in the handlers themselves) against the
// limit, handoffs, retries and the longest park; then the audit of one key, from the ledger.
// Exits 1 if a key ever ran more handlers at once than its limit.
//
// The demo keeps to its own queue and keys, so that it never runs, sweeps or counts anyone else's
// jobs; on a database holding unfinished jobs that are not its own it runs only when told --force.
//
// What only the run needs (the key state's codecs, the job listing, the progress bar) is imported
// where it is used, so that registering the command stays light.

export const DEMO_QUEUE = 'jobledger-demo';
export const DEMO_KEY_PREFIX = 'demo:';

export const DEMO_KEYS = (
  [
    ['tenant:acme', 1],
    ['tenant:globex', 2],
    ['tenant:initech', 3],
    ['tenant:umbrella', 1],
    ['api:stripe', 3],
    ['api:github', 2],
    ['api:slack', 1],
    ['report:nightly', 1],
    ['report:weekly', 2],
    ['export:s3', 3],
    ['import:csv', 2],
    ['email:bulk', 3],
  ] as const
).map(([name, limit]) => ({ key: `${DEMO_KEY_PREFIX}${name}`, limit }));

/** The most jobs a run may have: they must finish well within DEADLINE_MS. */
export const MAX_DEMO_JOBS = 2_000;

/** The key whose audit is shown: the crashed worker's job and a retry after a failure are on it. */
const AUDITED = DEMO_KEYS[0]!;
const CRASHED_WORKER = 'worker-that-crashed';
const SILENT_LEASE_MS = 1_000;
const SCHEDULED_DELAY_MS = 3_000;
const DEADLINE_MS = 50_000;
const SWEEP_MS = 200;

const sleep = (msToWait: number) => new Promise<void>((resolve) => setTimeout(resolve, msToWait));

/** One handler run, timed by the handler itself (monotonic clock, ms). */
export interface TimedRun {
  readonly key: string | null;
  readonly start: number;
  readonly end: number;
}

/** The largest number of runs that were under way at the same moment (one ending as another starts does not overlap). */
export const largestOverlap = (runs: readonly TimedRun[]): number => {
  const edges = runs.flatMap((r) => [
    { t: r.start, d: 1 },
    { t: r.end, d: -1 },
  ]);
  edges.sort((a, b) => a.t - b.t || a.d - b.d);
  let now = 0;
  let most = 0;
  for (const e of edges) most = Math.max(most, (now += e.d));
  return most;
};

/** Handlers that time every run (start to end, success or not) into `runs`. */
const timedHandlers = (runs: TimedRun[]) => {
  const timed =
    (body: (args: { ms: number }, ctx: JobContext) => Promise<void>) =>
    async (args: { ms: number }, ctx: JobContext): Promise<void> => {
      const start = performance.now();
      try {
        await body(args, ctx);
      } finally {
        runs.push({ key: ctx.key, start, end: performance.now() });
      }
    };
  return {
    work: timed((args) => sleep(args.ms)),
    /** Fails its first attempt; the retry, after a backoff, succeeds. */
    flaky: timed(async (args, ctx) => {
      await sleep(args.ms);
      if (ctx.attempt === 1) throw new Error('upstream timed out (first attempt)');
    }),
  };
};

interface KeySummary {
  readonly key: string;
  readonly limit: number;
  readonly jobs: number;
  readonly largestOverlap: number;
  readonly handoffs: number;
  readonly retries: number;
  readonly longestParkMs: number;
}

interface DemoResult {
  readonly run: string;
  readonly seconds: number;
  readonly keys: readonly KeySummary[];
  /** The handoffs of the crashed worker's job and of the job scheduled for later. */
  readonly crashed: readonly Handoff[];
  readonly scheduled: { readonly delayMs: number; readonly handoffs: readonly Handoff[] };
  readonly audit: { readonly key: string; readonly handoffs: readonly Handoff[] };
}

/** The job of the plan scheduled for later. */
const SCHEDULED = 5;

/** The run's jobs: which handler, key, run time; a few fail once, one is due later. */
const plan = (run: string, jobs: number) =>
  Array.from({ length: jobs }, (_, i) => {
    const { key, limit } = DEMO_KEYS[i % DEMO_KEYS.length]!;
    return {
      name: i % 23 === 0 ? 'flaky' : 'work',
      args: { ms: 20 + ((i * 37) % 100) },
      key,
      limit,
      queue: DEMO_QUEUE,
      jobId: `${run}-${String(i).padStart(3, '0')}`,
      priority: i % 7 === 0 ? -1 : 0,
      ...(i === SCHEDULED ? { delayMs: SCHEDULED_DELAY_MS } : {}),
    };
  });

/**
 * A worker that crashes right after it starts a job: the job is enqueued, started by a worker id
 * with no process behind it, and never run. Only the sweeper can free its slot, when its lease
 * (SILENT_LEASE_MS) expires; the job is then retried by a real worker. Done before the workers
 * start, so none of them takes the job's message first.
 */
const crashAfterStart = async (ledger: Ledger, run: string, note: (line: string) => void): Promise<string | null> => {
  const jobId = `${run}-crashed`;
  const { status } = await ledger.enqueue({ name: 'work', args: { ms: 30 }, key: AUDITED.key, limit: AUDITED.limit, queue: DEMO_QUEUE, leaseMs: SILENT_LEASE_MS, jobId }, { by: 'demo' });
  const { holders } = await import('../../../domain/key-state.js');
  const lease = holders((await ledger.keyState(AUDITED.key)).state).find((j) => j.jobId === jobId)?.lease;
  if (status !== 'acquired' || !lease) {
    note(`${AUDITED.key} is full (jobs left by an interrupted run?): no crashed worker this time`);
    return null;
  }
  await ledger.execute(keyStream(AUDITED.key), { type: 'Start', jobId, leaseId: lease.leaseId, workerId: CRASHED_WORKER });
  note(`${CRASHED_WORKER} started ${jobId} on ${AUDITED.key} and went silent: its ${ms(SILENT_LEASE_MS)} lease will expire`);
  return jobId;
};

const UNFINISHED: readonly JobStatus[] = ['scheduled', 'parked', 'holding', 'running'];

const isOwn = (job: { readonly queue: string; readonly key: string | null }): boolean =>
  job.queue === DEMO_QUEUE && job.key !== null && job.key.startsWith(DEMO_KEY_PREFIX);

/** The database's unfinished jobs that are not the demo's, counted by queue (read models). */
const foreignJobs = async (ledger: Ledger): Promise<Map<string, number>> => {
  const { MAX_PAGE } = await import('../../postgres/queries/list-jobs.js');
  const byQueue = new Map<string, number>();
  for (const status of UNFINISHED) {
    let cursor: string | null = null;
    do {
      const page = await ledger.jobs({ status, limit: MAX_PAGE, ...(cursor === null ? {} : { cursor }) });
      for (const job of page.jobs) if (!isOwn(job)) byQueue.set(job.queue, (byQueue.get(job.queue) ?? 0) + 1);
      cursor = page.nextCursor;
    } while (cursor !== null);
  }
  return byQueue;
};

/** Refuses (exit 2) a database holding jobs that are not the demo's, unless forced; with --force it only says so. */
const checkIsolation = async (ledger: Ledger, force: boolean, note: (line: string) => void): Promise<void> => {
  const foreign = await foreignJobs(ledger);
  if (foreign.size === 0) return;
  const n = [...foreign.values()].reduce((a, b) => a + b, 0);
  const found = `this database holds ${n} unfinished job${n === 1 ? '' : 's'} that are not the demo's (${[...foreign].map(([queue, count]) => `${count} on queue ${queue}`).join(', ')})`;
  const own = `its own queue ${DEMO_QUEUE} and keys ${DEMO_KEY_PREFIX}*`;
  if (!force) {
    throw new UsageError(
      `demo: ${found}; run it on a database of its own (unset DATABASE_URL for the embedded PostgreSQL, or point it at an empty database), or pass --force to run beside them (it uses only ${own})`,
    );
  }
  // The ledger's sweeper sweeps every key; with async projections the demo cannot run without it.
  if (ledger.projectionMode === 'async') {
    throw new UsageError(`demo: ${found}, and it is projected asynchronously: the demo would need the ledger's sweeper, which sweeps every key; run it on a database of its own`);
  }
  note(`demo: --force: ${found}; they are left alone (the demo uses only ${own})`);
};

/**
 * Expires silent leases and admits due jobs on the demo's keys only, every SWEEP_MS: the ledger's
 * sweeper (ledger.start()) does it for every key of the database. With async projections the
 * ledger's start() is needed for the projection runners anyway, and its sweeper does this.
 */
const sweepOwnKeys = (ledger: Ledger, note: (line: string) => void): { stop(): Promise<void> } => {
  if (ledger.projectionMode === 'async') {
    ledger.start();
    return { stop: async () => undefined };
  }
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      await ledger
        .executeMany(
          DEMO_KEYS.flatMap(({ key }) => [
            { stream: keyStream(key), command: { type: 'ExpireLeases', jitter: Math.random() } as const, metadata: { by: 'demo sweeper' } },
            { stream: keyStream(key), command: { type: 'AdmitDue' } as const, metadata: { by: 'demo sweeper' } },
          ]),
        )
        .catch((error: unknown) => note(`demo: sweeping its keys failed, trying again: ${(error as Error).message}`));
      await sleep(SWEEP_MS);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
    },
  };
};

const runDemo = async (ledger: Ledger, jobs: number, force: boolean, note: (line: string) => void): Promise<DemoResult> => {
  await checkIsolation(ledger, force, note);
  const run = randomUUID().slice(0, 8);
  const started = Date.now();
  const runs: TimedRun[] = [];
  const crashed = await crashAfterStart(ledger, run, note);
  const handlers = timedHandlers(runs);
  const workers = [ledger.worker({ handlers, concurrency: 6, queue: DEMO_QUEUE }), ledger.worker({ handlers, concurrency: 6, queue: DEMO_QUEUE })];
  for (const w of workers) w.start();
  const sweeper = sweepOwnKeys(ledger, note);
  const inputs = plan(run, jobs);
  const enqueued = await ledger.enqueueMany(inputs, { by: 'demo' });
  const count = (s: string) => enqueued.filter((e) => e.status === s).length;
  note(`run ${run}: enqueued ${jobs} jobs over ${DEMO_KEYS.length} keys in one transaction: ${count('acquired')} acquired, ${count('parked')} parked, ${count('scheduled')} scheduled`);
  const ids = [...inputs.map((i) => i.jobId), ...(crashed ? [crashed] : [])];
  const { progress } = await import('../progress.js');
  const bar = progress({ label: 'demo', unit: 'jobs', total: ids.length, plain: note, plainEveryMs: 1_000 });
  let finished = 0;
  try {
    while (finished < ids.length && Date.now() - started < DEADLINE_MS) {
      await sleep(200);
      finished = await ledger.finishedJobs(ids);
      bar.update(finished);
    }
  } finally {
    bar.stop();
    await Promise.all(workers.map((w) => w.stop(1_000)));
    await sweeper.stop();
  }
  if (finished < ids.length) throw new Error(`demo: ${ids.length - finished} of ${ids.length} jobs unfinished after ${ms(DEADLINE_MS)}`);

  const ours = new Set(ids);
  const keys: KeySummary[] = [];
  const all: Handoff[] = [];
  for (const { key, limit } of DEMO_KEYS) {
    const handoffs = (await ledger.audit({ key })).handoffs.filter((h) => ours.has(h.jobId));
    all.push(...handoffs);
    keys.push({
      key,
      limit,
      jobs: new Set(handoffs.map((h) => h.jobId)).size,
      largestOverlap: largestOverlap(runs.filter((r) => r.key === key)),
      handoffs: handoffs.length,
      retries: handoffs.filter((h) => (h.attempt ?? 1) > 1).length,
      longestParkMs: Math.max(0, ...handoffs.map((h) => h.parkedMs ?? 0)),
    });
  }
  const scheduled = inputs[SCHEDULED];
  return {
    run,
    seconds: (Date.now() - started) / 1000,
    keys,
    crashed: all.filter((h) => h.jobId === crashed),
    scheduled: { delayMs: SCHEDULED_DELAY_MS, handoffs: all.filter((h) => h.jobId === scheduled?.jobId) },
    audit: { key: AUDITED.key, handoffs: all.filter((h) => h.key === AUDITED.key) },
  };
};

const why = (h: Handoff): string =>
  h.reason === null
    ? 'still held'
    : h.reason === 'expired'
      ? 'lease expired: holder silent'
      : h.error !== null
        ? `${h.reason}: ${h.error}`
        : h.by !== null
          ? `${h.reason} by ${h.by}`
          : h.reason;

const seconds = (msSpan: number) => `${(msSpan / 1000).toFixed(1)} s`;

/** What became of the crashed worker's job and of the job scheduled for later. */
const story = (r: DemoResult): string[] => {
  const lines: string[] = [];
  const [silent, retried] = r.crashed;
  if (silent?.releasedAt != null && retried) {
    lines.push(
      `${silent.jobId} (${silent.key}): started by ${silent.workerId}, which went silent; the sweeper expired its lease ${seconds(silent.releasedAt - silent.acquiredAt)} after it took the slot, ` +
        `and ${retried.workerId} ran attempt ${retried.attempt}.`,
    );
  }
  const [due] = r.scheduled.handoffs;
  if (due) {
    const then = due.how === 'acquired' ? 'admitted when due' : `parked when due (the key was full), promoted ${seconds(due.parkedMs ?? 0)} later`;
    lines.push(`${due.jobId} (${due.key}): scheduled ${seconds(r.scheduled.delayMs)} ahead, holding no slot meanwhile; ${then}.`);
  }
  return lines;
};

const human = (r: DemoResult): string => {
  const t0 = Math.min(...r.audit.handoffs.map((h) => h.acquiredAt));
  const over = r.keys.filter((k) => k.largestOverlap > k.limit);
  return [
    `run ${r.run}: ${r.keys.reduce((n, k) => n + k.jobs, 0)} jobs over ${r.keys.length} keys in ${r.seconds.toFixed(1)} s`,
    table(
      ['key', 'jobs', 'largest overlap / limit', 'handoffs', 'retries', 'longest park'],
      r.keys.map((k) => [k.key, k.jobs, `${k.largestOverlap} / ${k.limit}`, k.handoffs, k.retries, ms(k.longestParkMs)]),
    ),
    over.length === 0
      ? 'largest overlap: handlers of a key that really ran at once, timed in the handlers; it never exceeded the limit.'
      : `OVER THE LIMIT: ${over.map((k) => `${k.key} ran ${k.largestOverlap} at once (limit ${k.limit})`).join(', ')}`,
    ...story(r),
    '',
    `audit of ${r.audit.key} (this run's slot handoffs, from the ledger; all of them: jobledger audit --key ${r.audit.key}):`,
    table(
      ['+time', 'job', 'how', 'worker', 'attempt', 'held for', 'let go'],
      r.audit.handoffs.map((h) => [
        `+${seconds(h.acquiredAt - t0)}`,
        h.jobId,
        h.how === 'promoted' ? `promoted after ${ms(h.parkedMs ?? 0)} parked` : 'acquired',
        h.workerId,
        h.attempt,
        h.releasedAt === null ? '' : ms(h.releasedAt - h.acquiredAt),
        why(h),
      ]),
    ),
  ].join('\n');
};

const jobCount = (value: string): number => {
  const n = integer('--jobs')(value);
  if (n < 1 || n > MAX_DEMO_JOBS) throw new UsageError(`--jobs: "${value}" is not from 1 to ${MAX_DEMO_JOBS}`);
  return n;
};

export const registerDemo = (program: Command, ctx: CommandContext): void => {
  program
    .command('demo')
    .description(
      'run a realistic workload in this process (two workers, the sweeper, retries, a job scheduled for later, a worker that crashes holding a slot), ' +
        'then show per key the largest overlap seen against its limit, and the audit of one key; exits 1 if a limit was ever exceeded',
    )
    .option('--jobs <n>', `how many jobs (besides the crashed worker's), 1 to ${MAX_DEMO_JOBS}`, jobCount, 300)
    .option('--force', `run even if the database holds jobs that are not the demo's (it still uses only its queue ${DEMO_QUEUE} and its keys ${DEMO_KEY_PREFIX}*)`)
    .option('--json', 'machine-readable output')
    .action(async (flags: { jobs: number; force?: boolean; json?: boolean }) => {
      const result = await withLedger(ctx, (ledger) => runDemo(ledger, flags.jobs, flags.force === true, ctx.note), { sweepIntervalMs: SWEEP_MS, poolSize: 10 });
      print({ json: flags.json === true }, result, () => human(result));
      const over = result.keys.filter((k) => k.largestOverlap > k.limit);
      if (over.length > 0) throw new Error(`demo: ${over.map((k) => `${k.key} ran ${k.largestOverlap} handlers at once, over its limit of ${k.limit}`).join('; ')}`);
    });
};

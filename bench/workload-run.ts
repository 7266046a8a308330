// One run of one workload against jobledger, in a scratch database: a port of the shared peer
// benchmark's lib/harness.mjs (its order of steps, its commit accounting) for jobledger only.
//
//  1. create the database; open a ledger (it migrates) and close it; wait until no session is
//     connected; read pg_stat_database (C0)
//  2. fork the worker processes; each opens a ledger and reports ready
//  3. jobs-first (default): the parent opens a producer ledger, starts the sampler, enqueues every
//     job (T_enqueue_start .. T_enqueue_end), then starts the workers in every process at once;
//     workers-first: the workers start first, then the producer enqueues
//  4. wait for `jobs` executions (or the timeout after T_enqueue_start), then a grace period to
//     catch late duplicates
//  5. stop the sampler, the workers, the producer; wait until no session is connected; read C1
//  6. figures from the handlers' records; drop the database
import { fork, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import type { Ledger } from '../src/adapters/ledger.js';
import { serverUrl, withScratchDatabase } from './scratch-database.js';
import { makeJobs, type Workload } from './workload-defs.js';
import { enqueueAll, openLedger, type BenchOptions } from './workload-ledger.js';
import { computeMetrics, readRecords, type Metrics } from './workload-metrics.js';
import type { FromWorker, ToWorker } from './workload-protocol.js';

const WORKER_SCRIPT = fileURLToPath(new URL('./workload-worker.js', import.meta.url));
const MAX_ERRORS = 50;

export type Order = 'jobs-first' | 'workers-first';

export interface RunConfig {
  readonly rep: number;
  readonly order: Order;
  readonly options: BenchOptions;
  /** Give up waiting for executions this long after T_enqueue_start. */
  readonly timeoutS: number;
  /** Workers stay up this long after the last execution, to catch late duplicates. */
  readonly graceMs: number;
  /** Interval of the slots-per-key sampler (keyed workloads). */
  readonly sampleMs: number;
  /** Also count the row versions each table took during the run (pg_stat_user_tables deltas: bench/rows.bench.ts). */
  readonly rows?: boolean;
  /** Run on the run's database once its workers and producer have gone (bench/rows.bench.ts --archive); its answer is the result's `after`. */
  readonly afterRun?: (url: string) => Promise<unknown>;
}

/** What the run did to one table: tuples inserted, updated (HOT ones among them) and deleted, and its indexes. */
export interface TableRows {
  readonly table: string;
  readonly inserted: number;
  readonly updated: number;
  readonly hotUpdated: number;
  readonly deleted: number;
  readonly indexes: number;
}

export interface Sampled {
  readonly samples: number;
  readonly intervalMs: number;
  readonly maxActivePerKey: number;
  readonly keysOverLimit: number;
  readonly violatingSamples: number;
  readonly worst: { readonly key: string; readonly n: number; readonly atMsAfterEnqueueStart: number | null } | null;
}

/** The workload's shape as run (its name as `workload`), and how. */
interface RunBase extends Pick<Workload, 'jobs' | 'keys' | 'limit' | 'jobMs' | 'processes' | 'concurrency'> {
  readonly workload: string;
  readonly rep: number;
  readonly order: Order;
  readonly options: BenchOptions;
  readonly postgres: string | null;
  readonly node: string;
  readonly startedAt: string;
}

export type Measured = Metrics & {
  readonly timedOut: boolean;
  readonly commits: number;
  readonly commitsPerJob: number;
  readonly rollbacks: number;
  readonly samplerCommitsExcluded: number;
  readonly sampledActive: Sampled | null;
  /** With RunConfig.rows: each table the run wrote, by the counters' deltas. */
  readonly tables?: readonly TableRows[];
  /** RunConfig.afterRun's answer. */
  readonly after?: unknown;
};

export type RunResult = RunBase & { readonly runSeconds: number; readonly errorCount: number; readonly errors: readonly string[] } & (
    | ({ readonly failed: false } & Measured)
    | { readonly failed: true; readonly error: string }
  );

type Log = (line: string) => void;

// ------------------------------------------------------------------ pg_stat_database

const dbNameOf = (url: string): string => decodeURIComponent(new URL(url).pathname.slice(1));

/** The server's connection for the counters: connected to the server's own database, so its queries are not counted. */
const connectAdmin = async (): Promise<pg.Client> => {
  const admin = new pg.Client({ connectionString: serverUrl, application_name: 'jobledger-bench-admin' });
  await admin.connect();
  return admin;
};

/**
 * Waits until no session is connected to the database: a backend flushes its statistics at exit
 * (an idle one may hold them for up to 10 s), so then the counters are complete. Returns the
 * sessions still connected at the timeout.
 */
const waitNoSessions = async (admin: pg.Client, db: string, timeoutMs = 15_000): Promise<number> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const n = (await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [db])).rows[0]?.n ?? 0;
    if (n === 0) break;
    if (Date.now() > deadline) return n;
    await sleep(50);
  }
  // As lib/db.mjs does; the exit-time flush precedes leaving pg_stat_activity on PostgreSQL 15, so
  // this is a margin only.
  await sleep(250);
  return 0;
};

interface Xact {
  readonly commit: number;
  readonly rollback: number;
}

/**
 * Each table's counters, read on a connection to the run's database (pg_stat_user_tables is per
 * database), opened and closed here: read when no other session is connected, so every backend
 * has flushed its statistics. A partition's (a week of appends) count as its parent's, unless
 * `byPartition` (archive moves a week from one parent to the other).
 */
export const readTables = async (url: string, { byPartition = false } = {}): Promise<Map<string, TableRows>> => {
  const client = new pg.Client({ connectionString: url, application_name: 'jobledger-bench-rows' });
  await client.connect();
  try {
    const { rows } = await client.query<{ table: string; ins: string; upd: string; hot: string; del: string; indexes: number }>(
      `SELECT ${byPartition ? 't.relname' : 'coalesce(p.inhparent::regclass::text, t.relname)'} AS table, sum(t.n_tup_ins) AS ins, sum(t.n_tup_upd) AS upd, sum(t.n_tup_hot_upd) AS hot, sum(t.n_tup_del) AS del,
              max((SELECT count(*)::int FROM pg_index i WHERE i.indrelid = t.relid)) AS indexes
       FROM pg_stat_user_tables t LEFT JOIN pg_inherits p ON p.inhrelid = t.relid
       GROUP BY 1`,
    );
    return new Map(rows.map((r) => [r.table, { table: r.table, inserted: Number(r.ins), updated: Number(r.upd), hotUpdated: Number(r.hot), deleted: Number(r.del), indexes: r.indexes }]));
  } finally {
    await client.end();
  }
};

export const tableDeltas = (before: ReadonlyMap<string, TableRows>, after: ReadonlyMap<string, TableRows>): TableRows[] =>
  [...after.values()]
    .map((a) => {
      const b = before.get(a.table);
      return { table: a.table, inserted: a.inserted - (b?.inserted ?? 0), updated: a.updated - (b?.updated ?? 0), hotUpdated: a.hotUpdated - (b?.hotUpdated ?? 0), deleted: a.deleted - (b?.deleted ?? 0), indexes: a.indexes };
    })
    .filter((d) => d.inserted + d.updated + d.deleted > 0)
    .sort((x, y) => x.table.localeCompare(y.table));

const readXact = async (admin: pg.Client, db: string): Promise<Xact> => {
  // stats_fetch_consistency may cache a snapshot: drop it so this reads the shared counters anew.
  await admin.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await admin.query<{ c: string; r: string }>('SELECT xact_commit AS c, xact_rollback AS r FROM pg_stat_database WHERE datname = $1', [db]);
  return { commit: Number(rows[0]?.c ?? NaN), rollback: Number(rows[0]?.r ?? NaN) };
};

// ------------------------------------------------------------------ sampler

// The ledger's own books: slots held per key (read model jl_slots, written in the transaction of
// the admission or release), and per limit key by jobs of other keys (jl_limit_jobs: stacked
// limits). A holder counts from its admission, also before a worker started it.
const SAMPLE_SQL = `
SELECT key, count(*)::int AS n FROM jl_slots WHERE key IS NOT NULL GROUP BY key
UNION ALL
SELECT key, count(*)::int AS n FROM jl_limit_jobs WHERE status = 'holding' GROUP BY key`;

interface Sampler {
  readonly stop: () => Promise<void>;
  readonly result: () => Sampled;
  /** Its commits, to exclude: one per query, one for the connection's start. */
  readonly commits: () => number;
}

/**
 * Every `intervalMs`, in one MVCC snapshot on its own connection, the slots held per key: n > limit
 * is an over-admission by the ledger's own books, even when no-op handlers never overlap.
 */
const startSampler = async (url: string, limitOf: (key: string) => number, intervalMs: number, enqueueStart: () => bigint | null, onError: Log): Promise<Sampler> => {
  const client = new pg.Client({ connectionString: url, application_name: 'jobledger-bench-sampler' });
  await client.connect();
  const maxByKey = new Map<string, number>();
  let queries = 0;
  let violatingSamples = 0;
  let worst: Sampled['worst'] = null;
  let stopping = false;
  const sample = async (): Promise<void> => {
    const { rows } = await client.query<{ key: string; n: number }>(SAMPLE_SQL);
    queries++;
    const since = enqueueStart();
    const atMs = since === null ? null : Math.round(Number(process.hrtime.bigint() - since) / 1e6);
    let violating = false;
    const held = new Map<string, number>();
    for (const { key, n } of rows) held.set(key, (held.get(key) ?? 0) + n);
    for (const [key, n] of held) {
      if (n > (maxByKey.get(key) ?? 0)) maxByKey.set(key, n);
      if (n <= limitOf(key)) continue;
      violating = true;
      if (worst === null || n > worst.n) worst = { key, n, atMsAfterEnqueueStart: atMs };
    }
    if (violating) violatingSamples++;
  };
  const loop = (async () => {
    while (!stopping) {
      await sample();
      await sleep(intervalMs);
    }
  })().catch((error: unknown) => onError(`sampler: ${error instanceof Error ? error.message : String(error)}`));
  let stopped: Promise<void> | null = null;
  return {
    // Idempotent: a failed run's clean-up may stop it again.
    stop: () =>
      (stopped ??= (async () => {
        stopping = true;
        await loop;
        await client.end().catch(() => undefined);
      })()),
    result: () => {
      const max = Math.max(0, ...maxByKey.values());
      const over = [...maxByKey].filter(([key, n]) => n > limitOf(key)).length;
      return { samples: queries, intervalMs, maxActivePerKey: max, keysOverLimit: over, violatingSamples, worst };
    },
    commits: () => queries + 1,
  };
};

// ------------------------------------------------------------------ worker processes

interface Child {
  readonly index: number;
  readonly proc: ChildProcess;
  readonly recordFile: string;
  executed: number;
  exited: boolean;
  exitCode: number | null;
}

const tell = (c: Child, message: ToWorker): void => {
  if (!c.exited && c.proc.connected) c.proc.send(message);
};

/** Resolves with the child's next message of `type`; rejects on a fatal message, its exit, or the timeout. */
const expect = (c: Child, type: FromWorker['type'], timeoutMs: number): Promise<FromWorker> =>
  new Promise((resolve, reject) => {
    if (c.exited) return reject(new Error(`worker ${c.index} exited (code ${c.exitCode}) before '${type}'`));
    const done = (): void => {
      clearTimeout(timer);
      c.proc.off('message', onMessage);
      c.proc.off('exit', onExit);
    };
    const onMessage = (m: FromWorker): void => {
      if (m.type === type) (done(), resolve(m));
      else if (m.type === 'fatal') (done(), reject(new Error(`worker ${c.index}: ${m.message}`)));
    };
    const onExit = (code: number | null): void => (done(), reject(new Error(`worker ${c.index} exited (code ${code}) before '${type}'`)));
    const timer = setTimeout(() => (done(), reject(new Error(`worker ${c.index} did not send '${type}' within ${timeoutMs} ms`))), timeoutMs);
    c.proc.on('message', onMessage);
    c.proc.on('exit', onExit);
  });

const expectAll = (children: readonly Child[], type: FromWorker['type'], timeoutMs = 60_000): Promise<FromWorker[]> =>
  Promise.all(children.map((c) => expect(c, type, timeoutMs)));

const forkWorker = (index: number, dir: string, onError: Log): Child => {
  // The child's stdout goes to stderr: stdout is for the RESULT lines and the table.
  const proc = fork(WORKER_SCRIPT, [], { stdio: ['ignore', 2, 2, 'ipc'] });
  const c: Child = { index, proc, recordFile: path.join(dir, `worker-${index}.csv`), executed: 0, exited: false, exitCode: null };
  proc.on('message', (m: FromWorker) => {
    if (m.type === 'progress' || m.type === 'stopped') c.executed = m.executed;
    if (m.type === 'error') onError(`worker ${index}: ${m.message}`);
  });
  proc.on('exit', (code) => Object.assign(c, { exited: true, exitCode: code }));
  return c;
};

const executedSoFar = (children: readonly Child[]): number => children.reduce((sum, c) => sum + c.executed, 0);

/** Waits for every child to exit, killing those that do not within 5 s; returns the killed ones. */
const reap = async (children: readonly Child[]): Promise<Child[]> => {
  for (let i = 0; i < 100 && children.some((c) => !c.exited); i++) await sleep(50);
  const left = children.filter((c) => !c.exited);
  for (const c of left) c.proc.kill('SIGKILL');
  return left;
};

// ------------------------------------------------------------------ the run

interface Timed {
  readonly enqueueStartNs: bigint;
  readonly enqueueEndNs: bigint;
  readonly timedOut: boolean;
}

/** Every worker process starts its worker at once (told together, awaited together). */
const startWorkers = async (children: readonly Child[], log: Log): Promise<void> => {
  const started = expectAll(children, 'started');
  for (const c of children) tell(c, { type: 'start' });
  await started;
  log(`${children.length} worker processes started`);
};

/** Steps 3 (from the enqueue on) and 4: enqueue, the workers (jobs-first), the wait for the executions. */
const enqueueAndWait = async (
  w: Workload,
  cfg: RunConfig,
  children: readonly Child[],
  producer: Ledger,
  log: Log,
  onError: Log,
  onEnqueueStart: (ns: bigint) => void,
): Promise<Timed> => {
  const jobs = makeJobs(w); // before T_enqueue_start, as the peer harness does
  const enqueueStartNs = process.hrtime.bigint();
  onEnqueueStart(enqueueStartNs);
  await enqueueAll(producer, jobs, cfg.options);
  const enqueueEndNs = process.hrtime.bigint();
  log(`enqueued ${w.jobs} jobs in ${(Number(enqueueEndNs - enqueueStartNs) / 1e6).toFixed(0)} ms`);
  if (cfg.order === 'jobs-first') await startWorkers(children, log);

  const deadline = enqueueStartNs + BigInt(Math.round(cfg.timeoutS * 1e9));
  let nextProgress = Date.now() + 5_000;
  let timedOut = false;
  while (executedSoFar(children) < w.jobs) {
    if (children.some((c) => c.exited)) {
      onError('a worker process exited early');
      break;
    }
    if (process.hrtime.bigint() > deadline) {
      timedOut = true; // a problem of the run, not an error of the library: the result's timedOut, lost
      log(`timed out: ${executedSoFar(children)} of ${w.jobs} executions ${cfg.timeoutS} s after enqueue start`);
      break;
    }
    if (Date.now() > nextProgress) {
      log(`${executedSoFar(children)} of ${w.jobs} executed`);
      nextProgress += 5_000;
    }
    await sleep(20);
  }
  await sleep(cfg.graceMs);
  return { enqueueStartNs, enqueueEndNs, timedOut };
};

/** Step 5: workers first (they finish or yield their jobs), then the producer; the records are complete afterwards. */
const stopAll = async (children: readonly Child[], producer: Ledger, onError: Log): Promise<void> => {
  const live = children.filter((c) => !c.exited);
  const stopped = expectAll(live, 'stopped').catch((error: unknown) => onError(`stop: ${error instanceof Error ? error.message : String(error)}`));
  for (const c of live) tell(c, { type: 'stop' });
  await stopped;
  await producer.close();
  for (const c of await reap(children)) onError(`worker ${c.index} did not exit; killed`);
};

interface Context {
  readonly w: Workload;
  readonly cfg: RunConfig;
  readonly url: string;
  readonly admin: pg.Client;
  readonly dir: string;
  readonly log: Log;
  readonly onError: Log;
  readonly children: Child[];
  sampler: Sampler | null;
  producer: Ledger | null;
}

const measure = async (x: Context): Promise<Measured> => {
  const { w, cfg, url, admin, log, onError, children } = x;
  const db = dbNameOf(url);
  const role = (name: string) => (message: string) => onError(`${name}: ${message}`);
  log('install (createLedger migrates on open)');
  await (await openLedger(url, 'install', cfg.options, role('install'))).close();
  const left = await waitNoSessions(admin, db);
  if (left > 0) onError(`${left} sessions still connected after install`);
  // Its own session gone before the commits are counted: it adds none to the run's.
  const t0 = cfg.rows === true ? await readTables(url) : undefined;
  if (t0 !== undefined) await waitNoSessions(admin, db);
  const x0 = await readXact(admin, db);

  for (let i = 0; i < w.processes; i++) children.push(forkWorker(i, x.dir, onError));
  const ready = expectAll(children, 'ready');
  for (const c of children) tell(c, { type: 'init', databaseUrl: url, processIndex: c.index, recordFile: c.recordFile, concurrency: w.concurrency, options: cfg.options });
  await ready;

  if (cfg.order === 'workers-first') await startWorkers(children, log);
  let enqueueStartNs: bigint | null = null;
  const producer = (x.producer = await openLedger(url, 'producer', cfg.options, role('producer')));
  if (w.limit !== null && cfg.sampleMs > 0) {
    const keyLimit = w.limit;
    const limitKeys = new Map(Array.from({ length: w.jobs }, (_, i) => w.limitsOf?.(i) ?? []).flat().map((l) => [l.key, l.limit]));
    x.sampler = await startSampler(url, (key) => limitKeys.get(key) ?? keyLimit, cfg.sampleMs, () => enqueueStartNs, onError);
  }
  // The sampler runs from before the enqueue (jobs-first admits at enqueue); its worst sample is
  // timed from the enqueue start once there is one.
  const timed = await enqueueAndWait(w, cfg, children, producer, log, onError, (ns) => (enqueueStartNs = ns));
  await x.sampler?.stop();
  await stopAll(children, producer, onError);
  x.producer = null;
  const left2 = await waitNoSessions(admin, db);
  if (left2 > 0) onError(`${left2} sessions still connected at the end; the commit count may be incomplete`);
  const x1 = await readXact(admin, db);
  const tables = t0 === undefined ? undefined : tableDeltas(t0, await readTables(url));
  const after = cfg.afterRun === undefined ? undefined : await cfg.afterRun(url);

  const metrics = computeMetrics(readRecords(children.map((c) => c.recordFile)), w, timed.enqueueStartNs, timed.enqueueEndNs);
  const samplerCommits = x.sampler?.commits() ?? 0;
  const commits = x1.commit - x0.commit - samplerCommits;
  return {
    ...metrics,
    timedOut: timed.timedOut,
    commits,
    commitsPerJob: Math.round((commits / w.jobs) * 1000) / 1000,
    rollbacks: x1.rollback - x0.rollback,
    samplerCommitsExcluded: samplerCommits,
    sampledActive: x.sampler?.result() ?? null,
    ...(tables === undefined ? {} : { tables }),
    ...(after === undefined ? {} : { after }),
  };
};

/** Whatever a failed run left: the sampler, worker processes, the producer, the record files. */
const cleanUp = async (x: Context): Promise<void> => {
  await x.sampler?.stop().catch(() => undefined);
  for (const c of x.children) if (!c.exited) c.proc.kill('SIGKILL');
  await x.producer?.close().catch(() => undefined);
  fs.rmSync(x.dir, { recursive: true, force: true });
};

const serverVersion = async (admin: pg.Client): Promise<string | null> =>
  (await admin.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]?.v ?? null;

/** One run of `w`; never throws for a failure of the run itself (it is in the result), only for a usage error. */
export const runOnce = async (w: Workload, cfg: RunConfig, log: Log): Promise<RunResult> => {
  const t0 = Date.now();
  const errors: string[] = [];
  let errorCount = 0;
  const onError: Log = (message) => {
    errorCount++;
    if (errors.length < MAX_ERRORS) errors.push(message);
  };
  const admin = await connectAdmin();
  const base: RunBase = {
    workload: w.name,
    rep: cfg.rep,
    jobs: w.jobs,
    keys: w.keys,
    limit: w.limit,
    jobMs: w.jobMs,
    processes: w.processes,
    concurrency: cfg.options.concurrency ?? w.concurrency,
    order: cfg.order,
    options: cfg.options,
    postgres: await serverVersion(admin),
    node: process.version,
    startedAt: new Date().toISOString(),
  };
  const finish = () => ({ runSeconds: Math.round((Date.now() - t0) / 100) / 10, errorCount, errors });
  try {
    const measured = await withScratchDatabase(`wl_${w.name}_${cfg.rep}`, async (url) => {
      const x: Context = { w, cfg, url, admin, dir: fs.mkdtempSync(path.join(os.tmpdir(), 'jobledger-bench-')), log, onError, children: [], sampler: null, producer: null };
      try {
        return await measure(x);
      } finally {
        await cleanUp(x);
      }
    });
    return { ...base, failed: false, ...measured, ...finish() };
  } catch (error) {
    return { ...base, failed: true, error: error instanceof Error ? (error.stack ?? error.message) : String(error), ...finish() };
  } finally {
    await admin.end().catch(() => undefined);
  }
};

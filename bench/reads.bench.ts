// Measures every read of the dashboard page and of the CLI on a ledger of a million events, and
// what serving them costs `jobledger serve` (its sweeper's tick lag, its resident set); prints the
// figures beside their goals and exits 0 whatever they are (it measures, it does not test).
//
//   npm run bench:reads                               # 1,000,000 events, 10 pollers for 5 minutes
//   npm run bench:reads -- --quick                    # 50,000 events, 20 s: the script itself, fast
//   npm run bench:reads -- --duration-s 60 --cli-runs 3 --timeout-s 30 --pollers 10
//   npm run bench:reads -- --database-url postgres://postgres@127.0.0.1:5432/jobledger_bench_reads
//   npm run bench:reads -- --rebuild                  # build the ledger again even if found built
//   npm run bench:reads -- --moving-ms 250            # the ledger moves while it is read (below)
//   npm run bench:reads -- --profile-serve /tmp/prof  # serve's CPU profile of the run, written when it stops
//
// The ledger (bench/reads-ledger.ts) is built through the library in the database
// jobledger_bench_reads (jobledger_bench_reads_quick), on DATABASE_URL's server or the machine's,
// and kept: a later run that finds it built measures it again (a few minutes saved). One run at a
// time holds it (an advisory lock on the server): a second is refused. Then:
//
// 1. `jobledger serve` in a child process, and each of the page's reads on it alone, --solo-runs
//    times in a row (timed out after --solo-timeout-s): what a read costs by itself.
// 2. 10 clients poll it as the page does (app.js: every 2 s after the last refresh ended, the
//    overview's reads at once, then the open view's), each with a view open: the big key, an
//    ordinary key, a job parked at the back of the big key, the job that renewed its lease 5,000
//    times, the job at the back of the capped queue, or a key's audit (not polled by the page,
//    whose key view reads the audit inside /api/keys/detail). Every read is timed to its body's
//    last byte; one not answered within --timeout-s is a timeout (the page has none: it would
//    wait, and serve goes on with a read timed out here). The sweeper's tick lag and how long
//    serve's event loop was held come from its /metrics, scraped before and after; its resident
//    set from /proc every second, its live heap after each full collection and its committed heap
//    after every collection (node --trace-gc).
// 3. serve stopped (what it still runs in PostgreSQL cancelled), each CLI read --cli-runs times,
//    from spawn to exit. `retry --key K --dead` on keys with no dead job reads what a retry reads
//    and writes nothing.
//
// The ledger's events are counted before and after: measuring must not change it. With
// --moving-ms, an arrival is refused on the key bench/mover that often while serve is read (from
// the first read alone to the last poll): a ledger in use moves between two polls, so no poll is
// answered by a 304 or by an answer shared under the tag of the one before; the events it adds
// are counted apart.
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createLedger } from '../src/adapters/ledger.js';
import { silentLogger } from '../src/domain/ports/logger.js';
import { keyStream } from '../src/domain/streams.js';
import { ensureLedger, eventCount, lockLedger, SCALES, type Built, type Scale } from './reads-ledger.js';
import { figuresOf, series, startServe, timedCli, timedGet, type Figures, type Sample, type Serve } from './reads-probes.js';
import { quantile, serverUrl, startCostNote } from './scratch-database.js';

/** The page's refresh period (app.js REFRESH_MS). */
const REFRESH_MS = 2_000;

const GOALS = { pageP99Ms: 100, cliP99Ms: 300, pollBytes: 50 * 1024, tickLagS: 1, rssMb: 300 };

interface Read {
  readonly label: string;
  readonly path: string;
}

interface View {
  readonly name: string;
  readonly reads: readonly Read[];
  /** false for a view the page never polls (a key's audit): shown, and left out of the poll-size goal. */
  readonly pagePoll?: false;
}

const query = (params: Record<string, string>) => new URLSearchParams(params).toString();

/** What each refresh of the page reads (app.js refresh, dead-jobs.js readDeadJobs with no filter: SHOWN of each status). */
const OVERVIEW: readonly Read[] = [
  { label: 'GET /api/keys', path: '/api/keys' },
  { label: 'GET /api/workers', path: '/api/workers' },
  { label: 'GET /api/queues', path: '/api/queues' },
  { label: 'GET /api/jobs?status=dead', path: `/api/jobs?${query({ limit: '25', status: 'dead' })}` },
  { label: 'GET /api/jobs?status=failed', path: `/api/jobs?${query({ limit: '25', status: 'failed' })}` },
];

/** The views a poller keeps open; the job view reads a job's history and explanation at once (job-view.js readJob). */
const viewsOf = (s: Built['subjects']): readonly View[] => {
  const key = (name: string, key: string): View => ({ name, reads: [{ label: `GET /api/keys/detail?key=${key}`, path: `/api/keys/detail?${query({ key })}` }] });
  const job = (name: string, jobId: string): View => ({
    name,
    reads: [
      { label: `GET /api/jobs/history?jobId=${jobId}`, path: `/api/jobs/history?${query({ jobId })}` },
      { label: `GET /api/jobs/explain?jobId=${jobId}`, path: `/api/jobs/explain?${query({ jobId })}` },
    ],
  });
  const audit = (name: string, key: string): View => ({ name, pagePoll: false, reads: [{ label: `GET /api/audit?key=${key}`, path: `/api/audit?${query({ key })}` }] });
  return [
    key('the big key', s.bigKey),
    key('an ordinary key', s.ordinaryKey),
    job('a job parked at the back of the big key', s.bigParkedJob),
    job('the job that renewed its lease', s.renewJob),
    job('the job at the back of the capped queue', s.cappedJob),
    audit('audit of the big key (not a page poll)', s.bigKey),
    audit('audit of an ordinary key (not a page poll)', s.ordinaryKey),
  ];
};

interface Options {
  readonly scale: Scale;
  readonly databaseUrl: string;
  readonly durationS: number;
  readonly timeoutMs: number;
  readonly pollers: number;
  readonly cliRuns: number;
  readonly cliTimeoutMs: number;
  readonly soloRuns: number;
  readonly soloTimeoutMs: number;
  readonly rebuild: boolean;
  /** 0: the ledger stands still. Otherwise an enqueue refused on a full key every this many ms, while serve is read: no poll finds it where the last one did. */
  readonly movingMs: number;
  /** A directory where serve writes a V8 CPU profile of the run (node --cpu-prof), when given. */
  readonly profileServe: string | undefined;
}

const options = (): Options => {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      'duration-s': { type: 'string' },
      'timeout-s': { type: 'string', default: '30' },
      pollers: { type: 'string', default: '10' },
      'cli-runs': { type: 'string' },
      'cli-timeout-s': { type: 'string', default: '60' },
      'solo-runs': { type: 'string' },
      'solo-timeout-s': { type: 'string', default: '120' },
      'database-url': { type: 'string' },
      rebuild: { type: 'boolean', default: false },
      'moving-ms': { type: 'string', default: '0' },
      'profile-serve': { type: 'string' },
    },
  });
  const positive = (flag: string, value: string | undefined, fallback: number) => {
    const n = Number(value ?? fallback);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`--${flag} expects a number above 0, got '${value}'`);
    return n;
  };
  const scale = values.quick ? SCALES.quick : SCALES.full;
  const url = new URL(serverUrl);
  url.pathname = `/jobledger_bench_reads${values.quick ? '_quick' : ''}`;
  return {
    scale,
    databaseUrl: values['database-url'] ?? url.toString(),
    durationS: positive('duration-s', values['duration-s'], values.quick ? 20 : 300),
    timeoutMs: positive('timeout-s', values['timeout-s'], 30) * 1000,
    pollers: Math.round(positive('pollers', values.pollers, 10)),
    cliRuns: Math.round(positive('cli-runs', values['cli-runs'], values.quick ? 3 : 10)),
    cliTimeoutMs: positive('cli-timeout-s', values['cli-timeout-s'], 60) * 1000,
    soloRuns: Math.round(positive('solo-runs', values['solo-runs'], 3)),
    soloTimeoutMs: positive('solo-timeout-s', values['solo-timeout-s'], 120) * 1000,
    rebuild: values.rebuild === true,
    movingMs: values['moving-ms'] === '0' ? 0 : positive('moving-ms', values['moving-ms'], 0),
    profileServe: values['profile-serve'],
  };
};

// ---- measuring --------------------------------------------------------------------------------

/** The samples of each read, by label, and of each view's whole polls (overview and view together). */
interface PageSamples {
  readonly reads: Map<string, Sample[]>;
  readonly polls: Map<string, { pollers: number; samples: Sample[] }>;
}

/** Set by a first Ctrl-C: no new poll or CLI run starts, and what was measured is printed. */
let interrupted = false;

const pollLikeThePage = async (serve: Serve, views: readonly View[], o: Options): Promise<PageSamples> => {
  const samples: PageSamples = { reads: new Map(), polls: new Map() };
  const record = (label: string, s: Sample) => {
    const of = samples.reads.get(label);
    if (of === undefined) samples.reads.set(label, [s]);
    else of.push(s);
  };
  const deadline = performance.now() + o.durationS * 1000;
  const poller = async (view: View) => {
    // Pages opened at different moments.
    await sleep(Math.random() * REFRESH_MS);
    while (performance.now() < deadline && !interrupted) {
      const started = performance.now();
      const overview = await Promise.all(OVERVIEW.map((r) => timedGet(serve.url + r.path, o.timeoutMs)));
      const opened = await Promise.all(view.reads.map((r) => timedGet(serve.url + r.path, o.timeoutMs)));
      OVERVIEW.forEach((r, i) => record(r.label, overview[i]!));
      view.reads.forEach((r, i) => record(r.label, opened[i]!));
      const all = [...overview, ...opened];
      const worst = all.find((s) => s.outcome === 'timeout') ?? all.find((s) => s.outcome === 'error');
      samples.polls.get(view.name)!.samples.push({ ms: performance.now() - started, bytes: all.reduce((n, s) => n + s.bytes, 0), outcome: worst?.outcome ?? 'ok' });
      await sleep(REFRESH_MS);
    }
  };
  const opened = Array.from({ length: o.pollers }, (_, i) => views[i % views.length]!);
  for (const view of opened) samples.polls.set(view.name, { pollers: (samples.polls.get(view.name)?.pollers ?? 0) + 1, samples: [] });
  const started = performance.now();
  const report = setInterval(() => {
    const all = [...samples.reads.values()].flat();
    const rss = serve.rss.at(-1)?.mb;
    process.stderr.write(
      `  polling ${Math.round((performance.now() - started) / 1000)}/${o.durationS} s: ${all.length.toLocaleString()} reads, ${all.filter((s) => s.outcome === 'timeout').length} timeouts, ${all.filter((s) => s.outcome === 'error').length} errors; serve RSS ${rss?.toFixed(0) ?? '?'} MB\n`,
    );
  }, Math.min(30_000, Math.max(5_000, (o.durationS * 1000) / 6)));
  try {
    await Promise.all(opened.map(poller));
  } finally {
    clearInterval(report);
  }
  return samples;
};

/** The key the mover enqueues on: limit 1, its slot held by its first job, every later arrival refused (two events, nothing else changed). */
const MOVER_KEY = 'bench/mover';

/**
 * Moves the ledger every `everyMs` until stopped: a ledger in use moves between two polls, and
 * then no poll is answered by a 304 or an answer shared under the tag of the poll before.
 */
const startMover = async (databaseUrl: string, everyMs: number): Promise<{ stop(): Promise<{ moves: number; events: number }> }> => {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  const ledger = await createLedger({ pool, migrate: false, logger: silentLogger });
  // What it adds is counted on its own stream (its first run also sets the key's limit and admits a holder).
  const ownEvents = async () => Number((await pool.query<{ n: string }>(`SELECT coalesce(sum(cardinality(types)), 0) AS n FROM appends WHERE stream = $1`, [keyStream(MOVER_KEY)])).rows[0]!.n);
  const before = await ownEvents();
  let moves = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const { status } = await ledger.enqueue({ name: 'mover', key: MOVER_KEY, limit: 1, whenFull: 'reject' });
      moves += status === 'rejected' ? 1 : 0;
      await sleep(everyMs);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
      const events = (await ownEvents()) - before;
      await ledger.close();
      await pool.end();
      return { moves, events };
    },
  };
};

/** A read or command line this slow is not run again: one run says enough, and more would take the run's time. */
const SLOW_MS = 10_000;

/** How long until serve answers a small read (GET /api/queues) within 500 ms again, at most 10 minutes: its pool and event loop are free. */
const untilServeAnswers = async (serve: Serve): Promise<number> => {
  const started = performance.now();
  while (performance.now() - started < 600_000) {
    const probe = await timedGet(`${serve.url}/api/queues`, 1_000);
    if (probe.outcome === 'ok' && probe.ms < 500) break;
    await sleep(500);
  }
  return performance.now() - started;
};

interface Alone {
  readonly samples: Sample[];
  /** After the read timed out: how much longer serve was slow to answer (ms), before the next read went. */
  busyAfterMs?: number;
}

/**
 * Each read alone on the server, `soloRuns` times in a row: what it costs without the pollers.
 * A read that timed out is waited out (serve goes on with it), so that the next one is alone too.
 */
const readAlone = async (serve: Serve, reads: readonly Read[], o: Options): Promise<Map<string, Alone>> => {
  const out = new Map<string, Alone>();
  for (const read of reads) {
    const alone: Alone = { samples: [] };
    out.set(read.label, alone);
    for (let i = 0; i < o.soloRuns && !interrupted; i++) {
      const sample = await timedGet(serve.url + read.path, o.soloTimeoutMs);
      alone.samples.push(sample);
      if (sample.outcome === 'timeout') alone.busyAfterMs = await untilServeAnswers(serve);
      if (sample.ms > SLOW_MS) break;
    }
    const f = figuresOf(alone.samples);
    const busy = alone.busyAfterMs === undefined ? '' : `, timed out (serve slow to answer for ${(alone.busyAfterMs / 1000).toFixed(1)} s more)`;
    process.stderr.write(`  ${read.label}: p50 ${ms(f.p50, o.soloTimeoutMs)} ms, ${size(f.maxBytes)}${busy}${f.errors > 0 ? `, ${f.firstError}` : ''}\n`);
  }
  return out;
};

/**
 * Cancels serve's statements until none has run for a second (at most `forMs`): those of the reads
 * the pollers timed out and left behind (serve runs every read it took, and a listing of every key
 * can take a minute), which keep its pool, and so /metrics and the sweeper, waiting; and, once it
 * stopped, those its backends still run (a backend notices a gone client only when it answers),
 * which would share the machine with the CLI's runs. Only this bench connects to its database.
 */
const cancelLeftovers = async (pool: pg.Pool): Promise<number> => {
  let cancelled = 0;
  let quietSince = performance.now();
  for (const deadline = performance.now() + 120_000; performance.now() < deadline && performance.now() - quietSince < 1_000; ) {
    const { rowCount } = await pool.query(
      `SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' AND backend_type = 'client backend'`,
    );
    if (rowCount !== 0) quietSince = performance.now();
    cancelled += rowCount ?? 0;
    await sleep(100);
  }
  return cancelled;
};

interface TickLag {
  readonly ticks: number;
  readonly sumS: number;
  readonly withinGoal: number;
  readonly maxS: number;
  /** How long serve's event loop was held since the previous scrape, at most and at p99 (undefined: not in /metrics). */
  readonly loop?: { readonly maxS: number; readonly p99S: number };
}

/** The sweeper's figures from serve's /metrics: five tries of a minute, since serve may still be folding streams for reads nobody waits for. */
const scrapeTickLag = async (serve: Serve): Promise<TickLag | string> => {
  const lag = 'jobledger_sweeper_tick_lag_seconds';
  let failure = '';
  for (let tries = 0; tries < 5; tries++) {
    try {
      const response = await fetch(`${serve.url}/metrics`, { signal: AbortSignal.timeout(60_000) });
      const text = await response.text();
      const [ticks, sumS, withinGoal, maxS] = [series(text, `${lag}_count`), series(text, `${lag}_sum`), series(text, `${lag}_bucket`, { le: String(GOALS.tickLagS) }), series(text, 'jobledger_sweeper_tick_lag_max_seconds')];
      if (ticks === undefined || sumS === undefined || withinGoal === undefined || maxS === undefined) return `no ${lag} in /metrics (status ${response.status})`;
      const [loopMaxS, loopP99S] = [series(text, 'jobledger_event_loop_delay_max_seconds'), series(text, 'jobledger_event_loop_delay_p99_seconds')];
      return { ticks, sumS, withinGoal, maxS, ...(loopMaxS === undefined || loopP99S === undefined ? {} : { loop: { maxS: loopMaxS, p99S: loopP99S } }) };
    } catch (error) {
      failure = `/metrics, ${tries + 1} tries: ${String(error)}`;
    }
  }
  return failure;
};

interface CliRead {
  readonly label: string;
  readonly args: readonly string[];
  /** An exit other than 0 that is the command's answer. */
  readonly expected?: { readonly code: number; readonly stderr: RegExp };
}

/** How an operator action with nothing to do ends (src/adapters/cli/commands/unchanged.ts). */
const NOTHING_CHANGED = { code: 2, stderr: /nothing changed/ };

const cliReadsOf = (s: Built['subjects']): readonly CliRead[] => {
  const at = new Date(s.midBuildAt).toISOString();
  return [
    { label: `explain --job ${s.bigParkedJob}`, args: ['explain', '--job', s.bigParkedJob] },
    { label: `explain --job ${s.renewJob}`, args: ['explain', '--job', s.renewJob] },
    { label: `explain --job ${s.cappedJob}`, args: ['explain', '--job', s.cappedJob] },
    { label: `job --job ${s.bigParkedJob}`, args: ['job', '--job', s.bigParkedJob] },
    { label: `job --job ${s.renewJob}`, args: ['job', '--job', s.renewJob] },
    { label: `job --job ${s.cappedJob}`, args: ['job', '--job', s.cappedJob] },
    { label: `audit --key ${s.bigKey}`, args: ['audit', '--key', s.bigKey] },
    { label: `audit --key ${s.ordinaryKey}`, args: ['audit', '--key', s.ordinaryKey] },
    { label: `state --key ${s.bigKey} --at <halfway>`, args: ['state', '--key', s.bigKey, '--at', at] },
    { label: `state --key ${s.ordinaryKey} --at <halfway>`, args: ['state', '--key', s.ordinaryKey, '--at', at] },
    // Nothing to retry: exit 2, "nothing changed", once it read what a retry reads.
    { label: `retry --key ${s.bigKey} --dead (none dead)`, args: ['retry', '--key', s.bigKey, '--dead', '--by', 'bench'], expected: NOTHING_CHANGED },
    { label: `retry --key ${s.ordinaryKey} --dead (none dead)`, args: ['retry', '--key', s.ordinaryKey, '--dead', '--by', 'bench'], expected: NOTHING_CHANGED },
    { label: 'keys', args: ['keys'] },
  ];
};

/** Each command line `cliRuns` times in a row. */
const runCliReads = async (reads: readonly CliRead[], o: Options): Promise<Map<string, Sample[]>> => {
  const out = new Map<string, Sample[]>();
  for (const read of reads) {
    const samples: Sample[] = [];
    out.set(read.label, samples);
    for (let i = 0; i < o.cliRuns && !interrupted; i++) {
      const sample = await timedCli(read.args, o.databaseUrl, o.cliTimeoutMs, read.expected);
      samples.push(sample);
      if (sample.ms > SLOW_MS) break;
    }
    const f = figuresOf(samples);
    process.stderr.write(`  ${read.label}: p50 ${ms(f.p50, o.cliTimeoutMs)} ms${f.timeouts > 0 ? ', timed out' : ''}${f.errors > 0 ? `, ${f.firstError}` : ''}\n`);
  }
  return out;
};

// ---- printing ---------------------------------------------------------------------------------

const ms = (v: number, timeoutMs: number): string => (Number.isNaN(v) ? '–' : v >= timeoutMs ? `≥${timeoutMs}` : v < 10 ? v.toFixed(1) : v.toFixed(0));
const size = (bytes: number): string => (Number.isNaN(bytes) ? '–' : bytes < 1024 ? `${bytes} B` : bytes < 1_048_576 ? `${(bytes / 1024).toFixed(1)} KB` : `${(bytes / 1_048_576).toFixed(1)} MB`);
const met = (ok: boolean): string => (ok ? 'met' : '**not met**');
const table = (head: readonly string[], rows: readonly (readonly string[])[]): string => [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n');
const outcomes = (f: Figures): string => `${f.n}${f.timeouts > 0 ? `, ${f.timeouts} timed out` : ''}${f.errors > 0 ? `, ${f.errors} failed` : ''}`;

interface Goal {
  readonly goal: string;
  readonly ok: boolean;
  readonly detail: string;
}

const pageTable = (page: PageSamples, reads: readonly Read[], o: Options, goals: Goal[]): string => {
  const rows = reads.flatMap(({ label }) => {
    const samples = page.reads.get(label);
    if (samples === undefined) return [];
    const f = figuresOf(samples);
    return [{ label, f, ok: f.p99 <= GOALS.pageP99Ms && f.timeouts + f.errors === 0 }];
  });
  const missed = rows.filter((r) => !r.ok);
  goals.push({ goal: `every page read p99 ≤ ${GOALS.pageP99Ms} ms`, ok: rows.length > 0 && missed.length === 0, detail: missed.length === 0 ? `${rows.length} reads` : `${missed.length} of ${rows.length} miss: ${missed.map((r) => r.label).join(', ')}` });
  const errors = rows.flatMap((r) => (r.f.firstError === undefined ? [] : [`- ${r.label}: ${r.f.firstError}`]));
  return [
    table(
      ['read', 'samples', 'p50 ms', 'p99 ms', 'max ms', 'size median / max', `p99 ≤ ${GOALS.pageP99Ms} ms`],
      rows.map(({ label, f, ok }) => [label, outcomes(f), ms(f.p50, o.timeoutMs), ms(f.p99, o.timeoutMs), ms(f.max, o.timeoutMs), `${size(f.medianBytes)} / ${size(f.maxBytes)}`, met(ok)]),
    ),
    ...(errors.length > 0 ? ['', 'First error of each read that failed:', ...errors] : []),
  ].join('\n');
};

const soloTable = (solo: Map<string, Alone>, o: Options): string =>
  table(
    ['read', 'runs', 'p50 ms', 'max ms', 'size', 'after a timeout, serve slow to answer for'],
    [...solo].map(([label, { samples, busyAfterMs }]) => {
      const f = figuresOf(samples);
      return [label, outcomes(f), ms(f.p50, o.soloTimeoutMs), ms(f.max, o.soloTimeoutMs), size(f.maxBytes), busyAfterMs === undefined ? '–' : `${(busyAfterMs / 1000).toFixed(1)} s more`];
    }),
  );

const pollTable = (page: PageSamples, views: readonly View[], o: Options, goals: Goal[]): string => {
  const polled = new Set(views.filter((v) => v.pagePoll !== false).map((v) => v.name));
  const rows = [...page.polls].map(([view, { pollers, samples }]) => {
    const f = figuresOf(samples);
    return { view, pollers, f, goal: polled.has(view), ok: f.n > 0 && f.maxBytes <= GOALS.pollBytes };
  });
  // The goal is the page's: a view it never polls (a key's audit, a page of 1,000 events) is shown, not counted.
  const counted = rows.filter((r) => r.goal);
  const over = counted.filter((r) => !r.ok);
  goals.push({ goal: `no poll over ${size(GOALS.pollBytes)} (a refresh of the page: the overview's reads and the view's)`, ok: over.length === 0, detail: over.length === 0 ? `largest ${size(Math.max(...counted.map((r) => r.f.maxBytes)))}` : over.map((r) => `${r.view}: ${size(r.f.maxBytes)}`).join('; ') });
  return table(
    ['open view', 'pollers', 'polls', 'p50 ms', 'p99 ms', 'max ms', 'bytes a poll, median / max', `≤ ${size(GOALS.pollBytes)}`],
    rows.map(({ view, pollers, f, goal, ok }) => [view, String(pollers), outcomes(f), ms(f.p50, Infinity), ms(f.p99, Infinity), ms(f.max, Infinity), `${size(f.medianBytes)} / ${size(f.maxBytes)}`, goal ? met(ok) : 'not a page poll']),
  );
};

const cliTable = (cli: Map<string, Sample[]>, o: Options, goals: Goal[]): string => {
  const rows = [...cli].map(([label, samples]) => {
    const f = figuresOf(samples);
    return { label, f, ok: f.n > 0 && f.p99 <= GOALS.cliP99Ms && f.timeouts + f.errors === 0 };
  });
  const missed = rows.filter((r) => !r.ok);
  goals.push({ goal: `every CLI read p99 ≤ ${GOALS.cliP99Ms} ms, start included`, ok: rows.length > 0 && missed.length === 0, detail: missed.length === 0 ? `${rows.length} command lines` : `${missed.length} of ${rows.length} miss: ${missed.map((r) => r.label).join(', ')}` });
  const errors = rows.flatMap((r) => (r.f.firstError === undefined ? [] : [`- ${r.label}: ${r.f.firstError}`]));
  return [
    table(
      ['jobledger …', 'runs', 'p50 ms', 'p99 ms', 'max ms', 'stdout', `p99 ≤ ${GOALS.cliP99Ms} ms`],
      rows.map(({ label, f, ok }) => [label, outcomes(f), ms(f.p50, o.cliTimeoutMs), ms(f.p99, o.cliTimeoutMs), ms(f.max, o.cliTimeoutMs), size(f.maxBytes), met(ok)]),
    ),
    ...(errors.length > 0 ? ['', 'First error of each command line that failed:', ...errors] : []),
  ].join('\n');
};

const tickLagLines = (before: TickLag | string, after: TickLag | string, pollingS: number, goals: Goal[]): string => {
  if (typeof before === 'string' || typeof after === 'string') {
    goals.push({ goal: `sweeper tick never late by more than ${GOALS.tickLagS} s`, ok: false, detail: `not measured: ${typeof before === 'string' ? before : after}` });
    return `sweeper tick lag: not measured (${typeof before === 'string' ? before : after})`;
  }
  const ticks = after.ticks - before.ticks;
  const late = ticks - (after.withinGoal - before.withinGoal);
  goals.push({ goal: `sweeper tick never late by more than ${GOALS.tickLagS} s`, ok: after.maxS <= GOALS.tickLagS, detail: `latest ${after.maxS.toFixed(3)} s` });
  return (
    `sweeper (serve's, every 1 s), while the pollers ran (${pollingS.toFixed(0)} s) and until /metrics answered after them: ${ticks} ticks (about ${pollingS.toFixed(0)} if each took no time: fewer, the ticks themselves were slow, which the lag does not count), ${late} of them started more than ${GOALS.tickLagS} s late, ` +
    `mean lag ${ticks === 0 ? '–' : `${(((after.sumS - before.sumS) / ticks) * 1000).toFixed(1)} ms`}; the latest tick since serve started: ${after.maxS.toFixed(3)} s late\n\n` +
    // The scrape before the pollers reset serve's event loop figures: these are the pollers'.
    (after.loop === undefined
      ? "serve's event loop: no jobledger_event_loop_delay_* in /metrics"
      : `serve's event loop (sampled every 10 ms), while the pollers ran: held at most ${(after.loop.maxS * 1000).toFixed(1)} ms at a time, its holds' p99 ${(after.loop.p99S * 1000).toFixed(1)} ms`)
  );
};

const rssLines = (serve: Serve, goals: Goal[]): string => {
  const phases = [...new Set(serve.rss.map((r) => r.phase))];
  const rows = phases.map((phase) => {
    const mb = serve.rss.filter((r) => r.phase === phase).map((r) => r.mb);
    const sorted = [...mb].sort((a, b) => a - b);
    return [phase, String(mb.length), sorted[0]!.toFixed(0), quantile(sorted, 0.5).toFixed(0), sorted.at(-1)!.toFixed(0), `${mb[0]!.toFixed(0)} → ${mb.at(-1)!.toFixed(0)}`];
  });
  const max = Math.max(...serve.rss.map((r) => r.mb));
  // Flat: under the pollers, no new high in the second half: the largest RSS of the second half
  // within 10 % of the first half's. A process that leaks keeps passing its earlier highs; one
  // that does not moves within a band, as V8 grows its young generation under the pollers'
  // allocations (16 to 32 MB on Node 20) and gives it back when they slow: the committed heap
  // below shows it. (Comparing the first and last tenths' medians, as this did, failed or passed
  // by which side of such a step each tenth fell on.)
  const polling = serve.rss.filter((r) => r.phase === 'polling').map((r) => r.mb);
  const half = Math.floor(polling.length / 2);
  const [firstHigh, secondHigh] = [Math.max(...polling.slice(0, half)), Math.max(...polling.slice(half))];
  goals.push({
    goal: `serve's RSS flat and under ${GOALS.rssMb} MB`,
    ok: half > 0 && max < GOALS.rssMb && secondHigh <= firstHigh * 1.1,
    detail: `max ${max.toFixed(0)} MB; under the pollers, the first half's high ${firstHigh.toFixed(0)} MB, the second half's ${secondHigh.toFixed(0)} MB`,
  });
  const heap = serve.heap.filter((h) => h.phase === 'polling').map((h) => h.mb);
  const committed = serve.committed.filter((h) => h.phase === 'polling').map((h) => h.mb);
  const heapLines = [
    heap.length === 0
      ? 'no full collection while the pollers ran'
      : `live heap after each full collection while the pollers ran (node --trace-gc): ${heap.length} collections, first ${heap[0]!.toFixed(1)} MB, last ${heap.at(-1)!.toFixed(1)} MB, largest ${Math.max(...heap).toFixed(1)} MB`,
    committed.length === 0
      ? 'no collection while the pollers ran'
      : `V8's committed heap after each collection while the pollers ran: ${committed.length} collections, smallest ${Math.min(...committed).toFixed(1)} MB, largest ${Math.max(...committed).toFixed(1)} MB, last ${committed.at(-1)!.toFixed(1)} MB`,
  ];
  return [table(['serve RSS (MB), phase', 'samples', 'min', 'median', 'max', 'first → last'], rows), ...heapLines].join('\n');
};

// ---- the run ----------------------------------------------------------------------------------

const run = async (o: Options, built: Built): Promise<void> => {
  const buildS = (built.buildMs / 1000).toFixed(0);
  console.log(
    built.reused
      ? `ledger: found built (${built.events.toLocaleString()} events, built ${built.builtAt.toISOString()} in ${buildS} s); --rebuild builds it again`
      : `ledger: built, ${built.events.toLocaleString()} events in ${buildS} s (${Math.round(built.events / (built.buildMs / 1000)).toLocaleString()} events/s, three client processes)`,
  );
  const s = built.subjects;
  console.log(`subjects: big key ${s.bigKey} (parked at its back: ${s.bigParkedJob}), renewing job ${s.renewJob}, back of the capped queue ${s.cappedJob}, ordinary key ${s.ordinaryKey}, halfway ${new Date(s.midBuildAt).toISOString()}`);

  const pool = new pg.Pool({ connectionString: o.databaseUrl, max: 1 });
  process.on('SIGINT', () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    process.stderr.write('interrupted: finishing the reads in flight, then printing what was measured (Ctrl-C again to quit now)\n');
  });
  const goals: Goal[] = [];
  const sections: string[] = [];
  let serve: Serve | undefined;
  try {
    const eventsBefore = await eventCount(pool);
    serve = await startServe(o.databaseUrl, { profileDir: o.profileServe });
    const mover = o.movingMs > 0 ? await startMover(o.databaseUrl, o.movingMs) : undefined;
    if (mover !== undefined) console.log(`the ledger moves: an arrival refused on ${MOVER_KEY} every ${o.movingMs} ms while serve is read`);
    console.log(`serve: ${serve.url} (pid ${serve.pid})`);
    // Its first ticks and reads (connections, caches) are not what is measured.
    await sleep(3_000);
    const views = viewsOf(s);
    const reads = [...OVERVIEW, ...views.flatMap((v) => v.reads)];
    serve.phase = 'one read at a time';
    console.log(`page reads alone: each ${o.soloRuns} times in a row, timed out after ${o.soloTimeoutMs / 1000} s`);
    const solo = await readAlone(serve, reads, o);
    sections.push(`### Page reads, one at a time\n\n${soloTable(solo, o)}`);
    const lagBefore = await scrapeTickLag(serve);
    serve.phase = 'polling';
    console.log(`page reads: ${o.pollers} pollers for ${o.durationS} s, each read timed out after ${o.timeoutMs / 1000} s`);
    const pollStarted = performance.now();
    let page: PageSamples | undefined;
    try {
      page = await pollLikeThePage(serve, views, o);
    } catch (error) {
      sections.push(`page reads: failed: ${String(error)}`);
    }
    const pollingS = (performance.now() - pollStarted) / 1000;
    serve.phase = 'after the pollers';
    const moved = await mover?.stop();
    const abandoned = await cancelLeftovers(pool);
    const lagAfter = await scrapeTickLag(serve);
    if (page !== undefined) {
      sections.push(`### Page reads, ${o.pollers} pollers for ${pollingS.toFixed(0)} s\n\n${pageTable(page, reads, o, goals)}`);
      sections.push(`### Polls (a refresh: overview and open view)\n\n${pollTable(page, views, o, goals)}`);
    }
    sections.push(tickLagLines(lagBefore, lagAfter, pollingS, goals));
    if (abandoned > 0) sections.push(`after the pollers: ${abandoned} statement${abandoned === 1 ? '' : 's'} still running in serve (of reads they had timed out, or the sweeper's) cancelled before /metrics was scraped`);
    sections.push(rssLines(serve, goals));
    if (serve.exited() !== undefined) sections.push(`**serve exited during the run** (${serve.exited()}):\n${serve.stderr()}`);
    await serve.stop();
    const cancelled = await cancelLeftovers(pool);
    if (!interrupted) {
      console.log(`CLI reads: ${o.cliRuns} runs each from spawn to exit, each killed after ${o.cliTimeoutMs / 1000} s (serve stopped${cancelled > 0 ? `, ${cancelled} of its statements still running cancelled` : ''})`);
      const cli = await runCliReads(cliReadsOf(s), o);
      sections.push(`### CLI reads, ${o.cliRuns} runs each\n\n${startCostNote()}.\n\n${cliTable(cli, o, goals)}`);
    }
    const eventsAfter = await eventCount(pool);
    const expected = eventsBefore + (moved?.events ?? 0);
    sections.push(
      eventsAfter !== expected
        ? `**the ledger changed during the run**: ${eventsBefore.toLocaleString()} events before, ${eventsAfter.toLocaleString()} after${moved === undefined ? '' : ` (the mover's ${moved.events.toLocaleString()} expected)`}`
        : moved === undefined
          ? `ledger unchanged by the run: ${eventsAfter.toLocaleString()} events`
          : `ledger changed by the mover alone: ${moved.events.toLocaleString()} events (${moved.moves.toLocaleString()} arrivals refused on ${MOVER_KEY}), ${eventsAfter.toLocaleString()} now`,
    );
  } catch (error) {
    sections.push(`**the run failed**: ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    await serve?.stop();
    await pool.end();
  }
  console.log(`\n${sections.join('\n\n')}\n`);
  console.log(`### Goals (load average ${loadavg()[0]!.toFixed(2)} at the end)\n\n${table(['goal', '', 'measured'], goals.map((g) => [g.goal, met(g.ok), g.detail]))}`);
};

const main = async (): Promise<void> => {
  const o = options();
  console.log(`bench:reads (${o.scale.name}): ${o.scale.events.toLocaleString()} events in ${o.databaseUrl.replace(/\/\/[^@]*@/, '//')}; ${cpus().length} cores, load average ${loadavg()[0]!.toFixed(2)} at start (the machine may be shared)`);
  const lock = await lockLedger(o.databaseUrl);
  try {
    await run(o, await ensureLedger(o.databaseUrl, o.scale, { rebuild: o.rebuild }));
  } finally {
    await lock.release();
  }
};

await main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
});

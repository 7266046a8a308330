// The shared peer benchmark's workloads, run against jobledger from the project itself, so a
// figure of its tables can be re-measured with one command (no copy of the peer harness needed).
// Prints figures only; never asserts on timing.
//
//   npm run bench:workloads                                   # every workload, once
//   npm run bench:workloads -- keyed hot latency --reps 3
//   npm run bench:workloads -- unkeyed --jobs 2000 --order workers-first
//   npm run bench:workloads -- latency --opt handoffSliceMs=0
//
// DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres; each run in a scratch database
// it drops. Each run: 2 worker processes x concurrency 8 (bench/workload-worker.ts), the producer
// and a sampler of jl_slots in this process (bench/workload-run.ts); figures as the peer
// benchmark's lib/metrics.mjs computes them (bench/workload-metrics.ts).
//
// stdout: one `RESULT {json}` line per run as it ends, then the table; progress goes to stderr.
// Exit 1 when a run lost or duplicated a job, put a key over its limit, or reported errors; 2 on a
// bad command line.
import { parseArgs } from 'node:util';
import { serverName } from './scratch-database.js';
import { resolveWorkload, UsageError, WORKLOAD_NAMES, type Workload } from './workload-defs.js';
import { parseOptions, type BenchOptions } from './workload-ledger.js';
import { runOnce, type Order, type RunResult } from './workload-run.js';
import { problems, renderErrors, renderTable } from './workload-table.js';

const USAGE = `usage: node dist/bench/workloads.bench.js [workload ...] [--jobs N] [--reps R]
       [--order jobs-first|workers-first] [--opt key=value ...] [--timeout-s S]
workloads: ${WORKLOAD_NAMES.join(', ')} (none given: all)
--opt: concurrency, handoffSliceMs, visibilityMs, graceMs, pollIntervalMs, poolSize, sweepIntervalMs,
       leaseMs, insertChunk (enqueueMany chunk, default 1000; 0 = one call)`;

interface Plan {
  readonly workloads: readonly Workload[];
  readonly reps: number;
  readonly order: Order;
  readonly options: BenchOptions;
  readonly timeoutS: number;
}

const positiveInteger = (flag: string, text: string | undefined, fallback: number): number => {
  if (text === undefined) return fallback;
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 1) throw new UsageError(`${flag} expects a whole number of 1 or more, got '${text}'`);
  return n;
};

/** The command line -> what to run; a UsageError for anything it cannot run. */
const parsePlan = (argv: readonly string[]): Plan | 'help' => {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        jobs: { type: 'string' },
        reps: { type: 'string' },
        order: { type: 'string', default: 'jobs-first' },
        opt: { type: 'string', multiple: true, default: [] },
        'timeout-s': { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
  const { values, positionals } = parsed;
  if (values.help) return 'help';
  const order = values.order;
  if (order !== 'jobs-first' && order !== 'workers-first') throw new UsageError(`--order must be jobs-first or workers-first, got '${order}'`);
  const jobs = values.jobs === undefined ? undefined : positiveInteger('--jobs', values.jobs, NaN);
  // Resolved up front: a typo fails before the first (minutes-long) run, not after it.
  const workloads = (positionals.length > 0 ? positionals : WORKLOAD_NAMES).map((name) => resolveWorkload(name, jobs));
  return {
    workloads,
    reps: positiveInteger('--reps', values.reps, 1),
    order,
    options: parseOptions(values.opt),
    // The peer harness's default; the current jobledger needs more for `unkeyed` (its reference used 400).
    timeoutS: positiveInteger('--timeout-s', values['timeout-s'], 170),
  };
};

const stamp = (): string => new Date().toISOString().slice(11, 23);

const runAll = async (plan: Plan): Promise<RunResult[]> => {
  const results: RunResult[] = [];
  for (const w of plan.workloads) {
    for (let rep = 1; rep <= plan.reps; rep++) {
      const label = `${w.name} #${rep}`;
      const log = (line: string): void => void console.error(`[workloads ${stamp()}] ${label}: ${line}`);
      log(`${w.description}: ${w.jobs} jobs, ${w.processes} processes x ${plan.options.concurrency ?? w.concurrency}, ${plan.order}`);
      const r = await runOnce(w, { rep, order: plan.order, options: plan.options, timeoutS: plan.timeoutS, graceMs: 500, sampleMs: 25 }, log);
      const found = problems(r);
      log(r.failed ? found[0]! : `${r.uniqueJobs} jobs, ${r.processingJobsPerSec ?? '-'} jobs/s processing, ${r.commitsPerJob} commits/job${found.length ? `; ${found.join(', ')}` : ''}`);
      console.log(`RESULT ${JSON.stringify(r)}`);
      results.push(r);
    }
  }
  return results;
};

const main = async (): Promise<number> => {
  let plan;
  try {
    plan = parsePlan(process.argv.slice(2));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`workloads.bench: ${error.message}\n${USAGE}`);
    return 2;
  }
  if (plan === 'help') {
    console.error(USAGE);
    return 0;
  }
  console.error(`jobledger workloads bench — ${serverName}, node ${process.version}`);
  const results = await runAll(plan);
  console.log(`\n${renderTable(results, plan.reps)}`);
  const errors = renderErrors(results);
  if (errors) console.log(`\nerrors (first few per run):\n${errors}`);
  const bad = results.filter((r) => problems(r).length > 0);
  for (const r of bad) console.error(`${r.workload} #${r.rep}: ${problems(r).join(', ')}`);
  return bad.length > 0 ? 1 : 0;
};

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  },
);

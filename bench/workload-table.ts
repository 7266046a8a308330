// The human-readable table of bench/workloads.bench.ts: one row per workload x rep and, with more
// than one rep, a median row per workload.
import type { RunResult } from './workload-run.js';

type Ok = Extract<RunResult, { failed: false }>;

/** A run's problems: lost or duplicated jobs, a key over its limit, errors. Empty: a clean run. */
export const problems = (r: RunResult): string[] => {
  if (r.failed) return [`failed: ${r.error.split('\n')[0]}`];
  const p: string[] = [];
  if (r.lost > 0) p.push(`${r.lost} lost`);
  if (r.duplicates > 0) p.push(`${r.duplicates} duplicates`);
  if (r.unknownRecords > 0) p.push(`${r.unknownRecords} executions of unknown jobs`);
  if ((r.keysOverLimit ?? 0) > 0) p.push(`${r.keysOverLimit} keys over the limit (handlers overlapped)`);
  if ((r.sampledActive?.violatingSamples ?? 0) > 0) p.push(`${r.sampledActive?.violatingSamples} samples with a key over the limit (jl_slots)`);
  if (r.timedOut) p.push('timed out');
  if (r.errorCount > 0) p.push(`${r.errorCount} errors`);
  return p;
};

const median = (xs: readonly number[]): number | null => {
  const s = [...xs].sort((a, b) => a - b);
  const n = s.length;
  if (n === 0) return null;
  return n % 2 === 1 ? s[(n - 1) / 2]! : (s[n / 2 - 1]! + s[n / 2]!) / 2;
};

const fmt = (x: number | null | undefined, digits = 0): string =>
  x === null || x === undefined || Number.isNaN(x) ? '-' : x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

interface Column {
  readonly title: string;
  /** One run's value. */
  readonly get: (r: Ok) => number | null | undefined;
  readonly digits?: number;
  /** In the median row: the total over the reps (counts of failures), not the median. */
  readonly total?: boolean;
}

const COLUMNS: readonly Column[] = [
  { title: 'jobs', get: (r) => r.jobs },
  { title: 'jobs/s proc', get: (r) => r.processingJobsPerSec },
  { title: 'jobs/s e2e', get: (r) => r.endToEndJobsPerSec },
  { title: 'enqueue ms', get: (r) => r.enqueueMs },
  { title: 'exec', get: (r) => r.executions, total: true },
  { title: 'unique', get: (r) => r.uniqueJobs, total: true },
  { title: 'dup', get: (r) => r.duplicates, total: true },
  { title: 'lost', get: (r) => r.lost, total: true },
  { title: 'limit', get: (r) => r.limit },
  { title: 'max/key', get: (r) => r.maxKeyConcurrency },
  { title: 'keys>lim', get: (r) => r.keysOverLimit, total: true },
  { title: 'sampled max', get: (r) => r.sampledActive?.maxActivePerKey },
  { title: 'samples>lim', get: (r) => r.sampledActive?.violatingSamples, total: true },
  { title: 'handoff p50', get: (r) => r.handoff?.p50Ms, digits: 1 },
  { title: 'p90', get: (r) => r.handoff?.p90Ms, digits: 1 },
  { title: 'p99', get: (r) => r.handoff?.p99Ms, digits: 1 },
  { title: 'max', get: (r) => r.handoff?.maxMs, digits: 1 },
  { title: 'commits/job', get: (r) => r.commitsPerJob, digits: 3 },
  { title: 'rollbacks', get: (r) => r.rollbacks, total: true },
  { title: 'errors', get: (r) => r.errorCount, total: true },
];

const runRow = (r: RunResult): string[] =>
  r.failed ? [r.workload, String(r.rep), `failed: ${r.error.split('\n')[0]}`] : [r.workload, String(r.rep), ...COLUMNS.map((c) => fmt(c.get(r), c.digits))];

const medianRow = (runs: readonly RunResult[]): string[] => {
  const ok = runs.filter((r): r is Ok => !r.failed);
  const cell = (c: Column): string => {
    const xs = ok.map(c.get).filter((x): x is number => typeof x === 'number');
    if (xs.length === 0) return '-';
    return fmt(c.total ? xs.reduce((a, b) => a + b, 0) : median(xs), c.digits);
  };
  const failed = runs.length - ok.length;
  return [runs[0]!.workload, `median${failed > 0 ? ` (${failed} failed)` : ''}`, ...COLUMNS.map(cell)];
};

const render = (header: readonly string[], rows: readonly string[][]): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r.length === header.length ? (r[i] ?? '').length : 0))));
  const line = (cells: readonly string[]): string =>
    cells.length === header.length
      ? cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ')
      : cells.join('  '); // a failed run: its message in place of the figures
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
};

/** The table of every run, in the order run, grouped by workload. */
export const renderTable = (results: readonly RunResult[], reps: number): string => {
  const byWorkload = new Map<string, RunResult[]>();
  for (const r of results) byWorkload.set(r.workload, [...(byWorkload.get(r.workload) ?? []), r]);
  const rows: string[][] = [];
  for (const runs of byWorkload.values()) {
    rows.push(...runs.map(runRow));
    if (reps > 1) rows.push(medianRow(runs));
  }
  const notes = [
    'jobs/s proc: first handler start -> last handler end; e2e: enqueue start -> last handler end (unique jobs).',
    'max/key: most handlers of one key running at once; sampled max: most slots one key held in jl_slots (every 25 ms).',
    'handoff (limit-1 workloads, ms): per key, next start - previous end. commits/job: pg_stat_database xact_commit delta / jobs.',
    ...(reps > 1 ? ['median rows: exec, unique, dup, lost, keys>lim, samples>lim, rollbacks and errors are totals over the reps.'] : []),
  ];
  return `${render(['workload', 'run', ...COLUMNS.map((c) => c.title)], rows)}\n\n${notes.join('\n')}`;
};

/** The first few error messages of each run that had any. */
export const renderErrors = (results: readonly RunResult[], perRun = 3): string =>
  results
    .filter((r) => r.errorCount > 0 || r.failed)
    .map((r) => {
      const lines = (r.failed ? [r.error, ...r.errors] : r.errors).slice(0, perRun).map((e) => `  ${e.split('\n')[0]!.slice(0, 300)}`);
      return `${r.workload} #${r.rep}: ${r.errorCount} errors${r.failed ? ', failed' : ''}\n${lines.join('\n')}`;
    })
    .join('\n');

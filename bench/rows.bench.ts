// Row versions per job, per table (issue 22's measure): the peer benchmark's unkeyed, keyed and hot
// workloads run against jobledger (bench/workload-run.ts, 2 worker processes x 8), and each table's
// pg_stat_user_tables counters read before and after, once every session has left (so every backend
// flushed its statistics). Prints figures only; never asserts.
//
//   npm run bench:rows                        # unkeyed, keyed, hot; 2,000 jobs each
//   npm run bench:rows -- keyed --jobs 20000
//
// Per table and job: inserted, updated (of which HOT), deleted, their sum (row versions), and index
// entries: one per index for each insert and each non-HOT update (a partial index that a row does
// not match takes none, so this is an upper bound). DATABASE_URL, else the local server, in scratch
// databases dropped afterwards.
import { parseArgs } from 'node:util';
import { resolveWorkload, UsageError } from './workload-defs.js';
import { runOnce, type TableRows } from './workload-run.js';

const DEFAULT_WORKLOADS = ['unkeyed', 'keyed', 'hot'];

const perJob = (n: number, jobs: number): string => (n / jobs).toFixed(2);

const render = (workload: string, jobs: number, tables: readonly TableRows[]): string => {
  const versions = (t: TableRows) => t.inserted + t.updated + t.deleted;
  const entries = (t: TableRows) => (t.inserted + t.updated - t.hotUpdated) * t.indexes;
  const lines = [
    `### ${workload}: ${jobs} jobs`,
    '',
    '| table | inserted | updated (HOT) | deleted | row versions | index entries (≤) |',
    '|---|---|---|---|---|---|',
    ...tables.map((t) => `| ${t.table} | ${perJob(t.inserted, jobs)} | ${perJob(t.updated, jobs)} (${perJob(t.hotUpdated, jobs)}) | ${perJob(t.deleted, jobs)} | ${perJob(versions(t), jobs)} | ${perJob(entries(t), jobs)} |`),
    `| **all** | | | | **${perJob(tables.reduce((n, t) => n + versions(t), 0), jobs)}** | **${perJob(tables.reduce((n, t) => n + entries(t), 0), jobs)}** |`,
  ];
  return lines.join('\n');
};

const main = async (): Promise<number> => {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { jobs: { type: 'string', default: '2000' } } });
  const jobs = Number(values.jobs);
  if (!Number.isSafeInteger(jobs) || jobs < 1) throw new UsageError(`--jobs expects a whole number of 1 or more, got '${values.jobs}'`);
  const out: string[] = [];
  for (const name of positionals.length > 0 ? positionals : DEFAULT_WORKLOADS) {
    const w = resolveWorkload(name, jobs);
    const r = await runOnce(w, { rep: 1, order: 'jobs-first', options: {}, timeoutS: 300, graceMs: 500, sampleMs: 0, rows: true }, (line) => process.stderr.write(`${line}\n`));
    if (r.failed || r.tables === undefined) {
      process.stderr.write(`${name}: ${r.failed ? r.error : 'no table counters'}\n`);
      return 1;
    }
    out.push(render(name, w.jobs, r.tables));
  }
  process.stdout.write(`${out.join('\n\n')}\n`);
  return 0;
};

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(error instanceof UsageError ? 2 : 1);
  },
);

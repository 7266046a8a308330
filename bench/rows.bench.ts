// Row versions per job, per table (issue 22's measure): the peer benchmark's unkeyed, keyed and hot
// workloads run against jobledger (bench/workload-run.ts, 2 worker processes x 8), and each table's
// pg_stat_user_tables counters read before and after, once every session has left (so every backend
// flushed its statistics). Prints figures only; never asserts.
//
//   npm run bench:rows                        # unkeyed, keyed, hot; 2,000 jobs each
//   npm run bench:rows -- keyed --jobs 20000
//   npm run bench:rows -- unkeyed --archive   # and what archiving the run costs, by week and --exact
//
// Per table and job: inserted, updated (of which HOT), deleted, their sum (row versions), and index
// entries: one per index for each insert and each non-HOT update (a partial index that a row does
// not match takes none, so this is an upper bound). DATABASE_URL, else the local server, in scratch
// databases dropped afterwards.
import { parseArgs } from 'node:util';
import pg from 'pg';
import { archiveFinishedJobs, type ArchiveResult } from '../src/adapters/postgres/archive.js';
import { resolveWorkload, UsageError, type Workload } from './workload-defs.js';
import { readTables, runOnce, tableDeltas, type TableRows } from './workload-run.js';

const DEFAULT_WORKLOADS = ['unkeyed', 'keyed', 'hot'];

const perJob = (n: number, jobs: number): string => (n / jobs).toFixed(2);

const render = (workload: string, jobs: number, tables: readonly TableRows[]): string => {
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

/** What an archive of the whole run cost: the row versions it wrote (per partition, summed) and its time. */
interface Archived {
  readonly mode: 'weeks' | 'exact';
  readonly ms: number;
  readonly result: ArchiveResult;
  readonly tables: readonly TableRows[];
}

// The run's rows, put in a week three weeks back (a partition made for it) before the archive, as
// if written then: by week, archive finds a week that ended. Not counted: the counters are read after.
const AGE_SQL = (from: string, to: string, part: string) => [
  `CREATE TABLE ${part} (LIKE appends INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)`,
  `ALTER TABLE appends ATTACH PARTITION ${part} FOR VALUES FROM ('${from}') TO ('${to}')`,
  `UPDATE appends SET week = '${from}'`,
];

const archiveRun = (mode: Archived['mode']) => async (url: string): Promise<Archived> => {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  try {
    if (mode === 'weeks') {
      const monday = (await pool.query<{ from: string; to: string }>(`SELECT to_char(m - 21, 'YYYY-MM-DD') AS from, to_char(m - 14, 'YYYY-MM-DD') AS to FROM (SELECT date_trunc('week', now() AT TIME ZONE 'UTC')::date AS m) x`)).rows[0]!;
      for (const sql of AGE_SQL(monday.from, monday.to, `appends_w${monday.from.replaceAll('-', '')}`)) await pool.query(sql);
    }
    await pool.end();
    const before = await readTables(url, { byPartition: true });
    const run = new pg.Pool({ connectionString: url, max: 4 });
    const t0 = performance.now();
    const result = await archiveFinishedJobs(run, { before: Date.now(), exact: mode === 'exact' });
    const ms = performance.now() - t0;
    await run.end();
    return { mode, ms, result, tables: tableDeltas(before, await readTables(url, { byPartition: true })) };
  } finally {
    await pool.end().catch(() => undefined);
  }
};

const versions = (t: TableRows) => t.inserted + t.updated + t.deleted;
const entries = (t: TableRows) => (t.inserted + t.updated - t.hotUpdated) * t.indexes;

const renderArchive = (workload: string, jobs: number, runs: readonly Archived[]): string =>
  [
    `### archive of ${workload}: ${jobs} jobs (jobledger archive --before now, on all of them)`,
    '',
    '| how | events moved | rows moved on | row versions per job | index entries per job (≤) | time (ms) |',
    '|---|---|---|---|---|---|',
    ...runs.map(
      (a) =>
        `| ${a.mode === 'weeks' ? 'by week (the run aged 3 weeks)' : '--exact (row by row)'} | ${a.result.events} | ${a.result.movedOn} | ${perJob(a.tables.reduce((n, t) => n + versions(t), 0), jobs)} | ${perJob(a.tables.reduce((n, t) => n + entries(t), 0), jobs)} | ${a.ms.toFixed(0)} |`,
    ),
  ].join('\n');

const run = async (w: Workload, afterRun?: (url: string) => Promise<unknown>) =>
  runOnce(w, { rep: 1, order: 'jobs-first', options: {}, timeoutS: 300, graceMs: 500, sampleMs: 0, rows: true, ...(afterRun ? { afterRun } : {}) }, (line) => process.stderr.write(`${line}\n`));

const main = async (): Promise<number> => {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { jobs: { type: 'string', default: '2000' }, archive: { type: 'boolean', default: false } } });
  const jobs = Number(values.jobs);
  if (!Number.isSafeInteger(jobs) || jobs < 1) throw new UsageError(`--jobs expects a whole number of 1 or more, got '${values.jobs}'`);
  const out: string[] = [];
  for (const name of positionals.length > 0 ? positionals : DEFAULT_WORKLOADS) {
    const w = resolveWorkload(name, jobs);
    const r = await run(w, values.archive ? archiveRun('weeks') : undefined);
    if (r.failed || r.tables === undefined) {
      process.stderr.write(`${name}: ${r.failed ? r.error : 'no table counters'}\n`);
      return 1;
    }
    out.push(render(name, w.jobs, r.tables));
    if (values.archive) {
      const exact = await run(w, archiveRun('exact'));
      if (exact.failed) {
        process.stderr.write(`${name}: ${exact.error}\n`);
        return 1;
      }
      out.push(renderArchive(name, w.jobs, [r.after as Archived, exact.after as Archived]));
    }
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

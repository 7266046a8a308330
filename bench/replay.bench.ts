// Measures `replay` (rebuild) and `replay --verify` on a large ledger and prints the figures
// (never asserts on them).
//
//   npm run bench:replay                       # 1,000,000 events; DATABASE_URL, else the machine's PostgreSQL
//   EVENTS=200000 npm run bench:replay         # a smaller ledger
//   KEEP_DB=1 npm run bench:replay             # keep the scratch database (its name is printed)
//
// The ledger is made through the library, as an application would make it: jobs enqueued over
// 200 keys (limit 2, so most park), then started and completed round after round, each round
// one transaction of Starts and one of Completes (whose releases promote the parked jobs): about
// 5 events per job. The ledger's size is measured (bytes per job, after a VACUUM ANALYZE). Then
// the read models are rebuilt from position zero, and verified.
import { performance } from 'node:perf_hooks';
import * as E from 'fp-ts/lib/Either.js';
import pg from 'pg';
import { createLedger } from '../src/adapters/ledger.js';
import type { KeyCommand } from '../src/commands/key-command.js';
import { createReadModelProjections } from '../src/projections/read-models.js';
import { rebuild } from '../src/projections/rebuild.js';
import { verify } from '../src/projections/verify.js';
import { quiet, serverName, withScratchDatabase } from './scratch-database.js';

const EVENTS = Number(process.env.EVENTS ?? 1_000_000);
const KEYS = 200;
const CHUNK = 2_000;

const count = async (pool: pg.Pool): Promise<number> => Number((await pool.query<{ n: string }>('SELECT coalesce(sum(cardinality(types)), 0) AS n FROM appends')).rows[0]!.n);

/** The tables of the ledger (of any schema since issue 9: those that exist count), for its bytes per job. */
const LEDGER_TABLES = ['events', 'events_archive', 'appends', 'appends_archive', 'streams', 'unique_event_ids', 'snapshots'];
const ledgerBytes = async (pool: pg.Pool): Promise<{ bytes: number; jobs: number }> =>
  (
    await pool.query<{ bytes: number; jobs: number }>(
      `SELECT (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c WHERE c.relname = ANY($1) AND c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace)::float8 AS bytes,
              (SELECT count(*) FROM jl_jobs)::int AS jobs`,
      [LEDGER_TABLES],
    )
  ).rows[0]!;

/** Peak resident set size while `work` runs, sampled every 50 ms. */
const peakRss = async <T>(work: () => Promise<T>): Promise<{ result: T; peakMb: number }> => {
  let peak = process.memoryUsage().rss;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 50);
  try {
    const result = await work();
    return { result, peakMb: Math.round(Math.max(peak, process.memoryUsage().rss) / 1_048_576) };
  } finally {
    clearInterval(timer);
  }
};

const fill = async (pool: pg.Pool): Promise<void> => {
  const ledger = await createLedger({ pool, logger: quiet });
  try {
    let jobs = 0;
    const started = performance.now();
    while ((await count(pool)) < EVENTS) {
      // Enqueue a chunk, then run every admitted job of it (and the ones their releases promote).
      const inputs = Array.from({ length: CHUNK }, (_, i) => ({ name: 'replay', args: { n: jobs + i }, key: `k${(jobs + i) % KEYS}`, limit: 2 }));
      jobs += CHUNK;
      await ledger.enqueueMany(inputs);
      for (;;) {
        const { rows } = await pool.query<{ stream: string; job_id: string; lease_id: string }>(`SELECT stream, job_id, lease_id FROM jl_slots WHERE worker_id IS NULL`);
        if (rows.length === 0) break;
        const starts: KeyCommand[] = rows.map((r) => ({ stream: r.stream, command: { type: 'Start', jobId: r.job_id, leaseId: r.lease_id, workerId: 'bench' } }));
        const completes: KeyCommand[] = rows.map((r) => ({ stream: r.stream, command: { type: 'Complete', jobId: r.job_id, leaseId: r.lease_id } }));
        for (const [what, commands] of [['Start', starts], ['Complete', completes]] as const) {
          const results = await ledger.executeMany(commands);
          const refused = results.filter(E.isLeft).length;
          if (refused > 0) throw new Error(`${refused} ${what} commands refused`);
        }
      }
      process.stderr.write(`\r  ${(await count(pool)).toLocaleString()} events, ${jobs.toLocaleString()} jobs (${Math.round((performance.now() - started) / 1000)} s)`);
    }
    process.stderr.write('\n');
  } finally {
    await ledger.close();
  }
};

const main = () =>
  withScratchDatabase(
    'replay',
    async (url) => {
      const pool = new pg.Pool({ connectionString: url, max: 4, pipeline: true } as pg.PoolConfig);
      pool.on('error', () => undefined);
      try {
        console.log(`replay bench on ${serverName}: filling a ledger of ${EVENTS.toLocaleString()} events`);
        const filling = performance.now();
        await fill(pool);
        const events = await count(pool);
        console.log(`ledger: ${events.toLocaleString()} events in ${((performance.now() - filling) / 1000).toFixed(1)} s (${Math.round(events / ((performance.now() - filling) / 1000)).toLocaleString()} events/s through the key writer)`);
        await pool.query('VACUUM ANALYZE');
        const size = await ledgerBytes(pool);
        console.log(`ledger tables (${LEDGER_TABLES.join(', ')}, those that exist, with indexes and TOAST): ${(size.bytes / 1_048_576).toFixed(1)} MB, ${Math.round(size.bytes / size.jobs).toLocaleString()} bytes per job (${size.jobs.toLocaleString()} jobs)`);
        const projection = createReadModelProjections();
        const report = (what: string, events: number, ms: number, peakMb: number, extra = '') =>
          console.log(`${what}: ${events.toLocaleString()} events in ${(ms / 1000).toFixed(1)} s = ${Math.round(events / (ms / 1000)).toLocaleString()} events/s, peak RSS ${peakMb} MB${extra}`);
        let t = performance.now();
        const rebuilt = await peakRss(() => rebuild(pool, projection));
        report('rebuild', rebuilt.result.events, performance.now() - t, rebuilt.peakMb);
        t = performance.now();
        const verified = await peakRss(() => verify(pool, projection));
        report('verify', verified.result.events, performance.now() - t, verified.peakMb, `, ${verified.result.differences.length} rows differ`);
      } finally {
        await pool.end();
      }
    },
    { keep: process.env.KEEP_DB !== undefined },
  );

await main();

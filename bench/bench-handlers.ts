// Handlers for bench/runtime.bench.ts's worker processes.
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 2 });
pool.on('error', () => undefined);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export default {
  noop: async () => undefined,
  /** Records its start (for the handoff latency), then runs 5 ms. */
  timed: async (_args: unknown, ctx: { jobId: string }) => {
    const startedMs = Date.now();
    await Promise.all([pool.query('INSERT INTO bench_starts (job_id, started_ms) VALUES ($1, $2)', [ctx.jobId, startedMs]), sleep(5)]);
  },
};

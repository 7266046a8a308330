import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SWEEP_CANDIDATES_SQL } from '../../src/adapters/postgres/queries/sweep-candidates.js';
import { mk } from '../../src/domain/events.js';
import { CLAIM_SQL } from '../../src/adapters/queue/job-queue.js';
import { UPDATE_JOBS_SQL } from '../../src/projections/job-rows.js';
import { projectReadModels } from '../../src/projections/read-models.js';
import { applyStatements } from '../../src/projections/apply.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// The read models' schema (migrations 0005, set-based writes, and 0015, the live row), and the
// plans of the queries that must stay cheap on a big ledger: the sweeper's scans, the workers'
// claim and the read models' UPDATE.

let db: MigratedDatabase;

const NOW = Date.UTC(2030, 0, 1);
const JOBS = 40_000;

beforeAll(async () => {
  db = await createMigratedDatabase(2);
  // A ledger's worth of rows: most jobs finished (run_at NULL), a tenth scheduled but only a few of
  // those due; a third holding a slot, most admitted and never started (expires_at NULL), a tenth
  // of those started, only a few of those expired. (What a sweep looks for is a sliver of what the
  // indexes hold.)
  await db.pool.query(
    `INSERT INTO jl_jobs (job_id, stream, key, seq, name, queue, args, priority, status, attempts, max_attempts, lease_ms, enqueued_at, run_at, updated_at)
     SELECT 'j' || i, 'key:k' || (i % 499), 'k' || (i % 499), i, 'n', 'default', '{}', 0,
            CASE WHEN i % 10 = 0 THEN 'scheduled' WHEN i % 3 = 0 THEN 'holding' ELSE 'completed' END, 0, 3, 30000,
            to_timestamp($1::float8 / 1000) - interval '1 day',
            CASE WHEN i % 10 = 0 THEN to_timestamp($1::float8 / 1000) + (CASE WHEN i % 2000 = 0 THEN -1 ELSE i % 97 + 1 END) * interval '1 hour' END,
            to_timestamp($1::float8 / 1000)
     FROM generate_series(1, $2) AS i`,
    [NOW, JOBS],
  );
  await db.pool.query(
    `UPDATE jl_jobs SET lease_id = job_id || ':1', how = 'acquired', acquired_at = enqueued_at,
            status = CASE WHEN seq % 30 = 3 THEN 'running' ELSE 'holding' END,
            expires_at = CASE WHEN seq % 30 = 3 THEN to_timestamp($1::float8 / 1000) + (CASE WHEN seq % 3000 = 3 THEN -1 ELSE seq % 29 + 1 END) * interval '1 second' END,
            worker_id = CASE WHEN seq % 30 = 3 THEN 'w' END, started_at = CASE WHEN seq % 30 = 3 THEN enqueued_at END, attempts = CASE WHEN seq % 30 = 3 THEN 1 ELSE 0 END
     WHERE status = 'holding'`,
    [NOW],
  );
  await db.pool.query('VACUUM ANALYZE jl_jobs');
}, 120_000);

afterAll(async () => {
  await db.drop();
});

const plan = async (sql: string, values: unknown[]): Promise<string> =>
  (await db.pool.query(`EXPLAIN ${sql}`, values)).rows.map((r) => r['QUERY PLAN']).join('\n');

describe('the read models\' schema', () => {
  it('migration 0005: dispatch_jobs, projection_streams and jl_jobs_stream gone, ledger_settings there; an admission may have no expiry', async () => {
    const { rows } = await db.pool.query(
      `SELECT to_regclass('dispatch_jobs') AS dispatch, to_regclass('projection_streams') AS streams, to_regclass('jl_jobs_stream') AS by_stream,
              to_regclass('ledger_settings')::text AS settings, to_regclass('jl_jobs_scheduled')::text AS scheduled`,
    );
    expect(rows).toEqual([{ dispatch: null, streams: null, by_stream: null, settings: 'ledger_settings', scheduled: 'jl_jobs_scheduled' }]);
    const { rows: nullable } = await db.pool.query(`SELECT is_nullable FROM information_schema.columns WHERE table_name = 'jl_slots' AND column_name = 'expires_at'`);
    expect(nullable).toEqual([{ is_nullable: 'YES' }]);
  });

  it('migration 0015: jl_slots and jl_parked are views of jl_jobs, the queue tables are gone; a start is ONE update of the job\'s row (one row version, not HOT: its status moves it between partial indexes)', async () => {
    const { rows: kinds } = await db.pool.query(
      `SELECT relname, relkind FROM pg_class WHERE relname IN ('jl_slots', 'jl_parked', 'jl_jobs', 'queue_messages', 'queue_archive', 'queues', 'queue_send_counts') ORDER BY relname`,
    );
    expect(kinds).toEqual([
      { relname: 'jl_jobs', relkind: 'r' },
      { relname: 'jl_parked', relkind: 'v' },
      { relname: 'jl_slots', relkind: 'v' },
    ]);
    const { rows: partial } = await db.pool.query(
      `SELECT c.relname AS index, pg_get_expr(i.indpred, i.indrelid) AS predicate FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
       WHERE i.indrelid = 'jl_jobs'::regclass AND i.indpred IS NOT NULL ORDER BY 1`,
    );
    expect(partial.map((r) => r.index)).toEqual(['jl_jobs_claim', 'jl_jobs_due', 'jl_jobs_expiry', 'jl_jobs_holders', 'jl_jobs_parked', 'jl_jobs_scheduled']);

    // j3 holds a slot nobody started; a worker starts it: one UPDATE of its row (status, attempts, worker, started_at, expiry).
    const client = await db.pool.connect();
    // This backend's counts not yet flushed to pg_stat_user_tables (the setup's UPDATE, if it ran here) show too: a difference.
    const counts = async () => (await client.query(`SELECT n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot FROM pg_stat_xact_user_tables WHERE relname = 'jl_jobs'`)).rows[0] ?? { upd: 0, hot: 0 };
    try {
      await client.query('BEGIN');
      const before = await counts();
      const statements = projectReadModels([
        { event: mk('JobStarted', { jobId: 'j3', leaseId: 'j3:1', workerId: 'w1', attempt: 1, expiresAt: NOW + 30_000, at: NOW }), stream: 'key:k3', revision: 9, key: 'k3', commit: 1n },
      ]);
      expect(statements.map((s) => s.text)).toEqual([UPDATE_JOBS_SQL]);
      await applyStatements(client, statements);
      const after = await counts();
      expect({ upd: after.upd - before.upd, hot: after.hot - before.hot }).toEqual({ upd: 1, hot: 0 });
      expect((await client.query(`SELECT status, attempts, worker_id, expires_at FROM jl_jobs WHERE job_id = 'j3'`)).rows).toEqual([{ status: 'running', attempts: 1, worker_id: 'w1', expires_at: new Date(NOW + 30_000) }]);
      expect((await client.query(`SELECT worker_id, attempt FROM jl_slots WHERE job_id = 'j3'`)).rows).toEqual([{ worker_id: 'w1', attempt: 1 }]);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it("a worker's claim (CLAIM_SQL, with its parameters) walks jl_jobs_claim from the oldest admission and stops at its limit", async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
      await client.query(`PREPARE test_claim (text, int, text[], text[]) AS ${CLAIM_SQL}`);
      const p = (await client.query(`EXPLAIN EXECUTE test_claim('default', 10, '{}', '{}')`)).rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(p, p).toMatch(/Index Scan using jl_jobs_claim on jl_jobs/);
      expect(p, p).not.toMatch(/Sort|Seq Scan/);
      const { rows } = await client.query(`EXECUTE test_claim('default', 10, '{key:k1}', '{j6}')`);
      expect(rows).toHaveLength(10);
      expect(rows.some((r: { stream: string; jobId: string }) => r.stream === 'key:k1' || r.jobId === 'j6')).toBe(false);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it("the sweeper's one query (with its parameters: now in epoch ms, a limit) uses jl_jobs_expiry and jl_jobs_due, and finds exactly the expired started leases and the due jobs", async () => {
    // No enable_seqscan = off: on tables this size the planner must prefer the indexes by itself.
    const counts = (await db.pool.query(`SELECT (SELECT count(*) FROM jl_jobs WHERE run_at IS NOT NULL)::int AS scheduled, (SELECT count(*) FROM jl_slots WHERE expires_at IS NOT NULL)::int AS started`)).rows[0];
    expect(counts.scheduled).toBeGreaterThan(3_000);
    expect(counts.started).toBeGreaterThan(1_000);
    const sweep = await plan(SWEEP_CANDIDATES_SQL, [NOW, 500, '', '', '']);
    // An index scan, an index-only scan, or a bitmap scan of the index: whichever, the index is what finds them.
    expect(sweep).toMatch(/(Index (Only )?Scan using jl_jobs_expiry on jl_jobs|Bitmap Index Scan on jl_jobs_expiry)/);
    expect(sweep).toMatch(/(Index (Only )?Scan using jl_jobs_due on jl_jobs|Bitmap Index Scan on jl_jobs_due)/);
    expect(sweep).not.toMatch(/Seq Scan on jl_jobs/);

    // And what it returns: the started leases past their expiry (never an unstarted admission), the scheduled jobs due.
    const streams = async (kind: string, limit = 500, after = '') =>
      (await db.pool.query<{ kind: string; stream: string }>(SWEEP_CANDIDATES_SQL, [NOW, limit, after, after, after])).rows.filter((r) => r.kind === kind).map((r) => r.stream).sort();
    const { rows: wantExpired } = await db.pool.query(`SELECT DISTINCT stream FROM jl_slots WHERE worker_id IS NOT NULL AND expires_at <= to_timestamp($1::float8 / 1000) ORDER BY stream`, [NOW]);
    expect(wantExpired.length).toBeGreaterThan(0);
    expect(await streams('expired')).toEqual(wantExpired.map((r) => r.stream).sort());
    const { rows: wantDue } = await db.pool.query(`SELECT DISTINCT stream FROM jl_jobs WHERE status = 'scheduled' AND run_at <= to_timestamp($1::float8 / 1000) ORDER BY stream`, [NOW]);
    expect(wantDue.length).toBeGreaterThan(0);
    expect(await streams('due')).toEqual(wantDue.map((r) => r.stream).sort());
    // $2 bounds each kind; $3-$5 go on after where the last sweep of each kind stopped, in stream order, so every candidate comes in turn (issue 21 #4).
    const want = wantDue.map((r) => r.stream as string).sort();
    expect(await streams('due', 3)).toEqual(want.slice(0, 3));
    expect(await streams('due', 3, want[2])).toEqual(want.slice(3, 6));
    expect(await streams('expired', 2)).toHaveLength(2);
  });

  it("the read models' UPDATE finds each row by primary key under the flush's generic plans, whatever the batch", async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
      await client.query(`PREPARE test_jobs (jsonb, text[], int, text[]) AS ${UPDATE_JOBS_SQL}`);
      const { rows } = await client.query(`EXPLAIN EXECUTE test_jobs('[{"job_id": "j3"}]', ARRAY['j3'], 1, ARRAY['key:k3'])`);
      const p = rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(p, p).toMatch(/(Bitmap )?Index Scan (using|on) jl_jobs_pkey/);
      expect(p, p).not.toMatch(/Seq Scan on jl_jobs/);
    } finally {
      await client.query('ROLLBACK');
      await client.query('DEALLOCATE ALL');
      client.release();
    }
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SWEEP_CANDIDATES_SQL } from '../../src/adapters/postgres/queries/sweep-candidates.js';
import { mk } from '../../src/domain/events.js';
import { UPDATE_JOBS_SQL, UPDATE_SLOTS_SQL, projectReadModels } from '../../src/projections/read-models.js';
import { applyStatements } from '../../src/projections/apply.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// The read models' schema after migration 0005 (set-based writes), and the plans of the queries
// that must stay cheap on a big ledger: the sweeper's scans and the read models' UPDATEs.

let db: MigratedDatabase;

const NOW = Date.UTC(2030, 0, 1);
const JOBS = 40_000;

beforeAll(async () => {
  db = await createMigratedDatabase(2);
  // A ledger's worth of rows: most jobs finished (run_at NULL), a tenth scheduled but only a few of
  // those due; most slots admitted and never started (expires_at NULL), a tenth started, only a
  // few of those expired. (What a sweep looks for is a sliver of what the indexes hold.)
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
    `INSERT INTO jl_slots (job_id, stream, key, lease_id, how, acquired_at, expires_at, worker_id, started_at, attempt)
     SELECT job_id, stream, key, job_id || ':1', 'acquired', enqueued_at,
            CASE WHEN seq % 30 = 3 THEN to_timestamp($1::float8 / 1000) + (CASE WHEN seq % 3000 = 3 THEN -1 ELSE seq % 29 + 1 END) * interval '1 second' END,
            CASE WHEN seq % 30 = 3 THEN 'w' END, CASE WHEN seq % 30 = 3 THEN enqueued_at END, CASE WHEN seq % 30 = 3 THEN 1 END
     FROM jl_jobs WHERE status = 'holding'`,
    [NOW],
  );
  await db.pool.query('VACUUM ANALYZE jl_jobs, jl_slots');
}, 120_000);

afterAll(async () => {
  await db.drop();
});

const plan = async (sql: string, values: unknown[]): Promise<string> =>
  (await db.pool.query(`EXPLAIN ${sql}`, values)).rows.map((r) => r['QUERY PLAN']).join('\n');

describe('migration 0005 (set-based writes)', () => {
  it('drops dispatch_jobs, projection_streams and jl_jobs_stream; adds ledger_settings; an admission may have no expiry', async () => {
    const { rows } = await db.pool.query(
      `SELECT to_regclass('dispatch_jobs') AS dispatch, to_regclass('projection_streams') AS streams, to_regclass('jl_jobs_stream') AS by_stream,
              to_regclass('ledger_settings')::text AS settings, to_regclass('jl_jobs_scheduled')::text AS scheduled`,
    );
    expect(rows).toEqual([{ dispatch: null, streams: null, by_stream: null, settings: 'ledger_settings', scheduled: 'jl_jobs_scheduled' }]);
    const { rows: nullable } = await db.pool.query(`SELECT is_nullable FROM information_schema.columns WHERE table_name = 'jl_slots' AND column_name = 'expires_at'`);
    expect(nullable).toEqual([{ is_nullable: 'YES' }]);
  });

  it('no jl_jobs index names status, and pages keep room (fillfactor 80): the read models\' UPDATE of a start is a HOT update', async () => {
    const { rows: indexes } = await db.pool.query(`SELECT pg_get_indexdef(indexrelid) AS def FROM pg_index WHERE indrelid = 'jl_jobs'::regclass`);
    expect(indexes.length).toBeGreaterThan(3);
    for (const { def } of indexes) expect(def).not.toMatch(/status/);
    expect((await db.pool.query(`SELECT reloptions FROM pg_class WHERE oid = 'jl_jobs'::regclass`)).rows[0].reloptions).toContain('fillfactor=80');

    // j3 holds a slot (from before the batch); a worker starts it: jl_jobs changes status, attempts, worker, started_at.
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const statements = projectReadModels([
        { event: mk('JobStarted', { jobId: 'j3', leaseId: 'j3:1', workerId: 'w1', attempt: 1, expiresAt: NOW + 30_000, at: NOW }), stream: 'key:k3', revision: 9, key: 'k3', commit: 1n },
      ]);
      expect(statements.map((s) => s.text)).toEqual([UPDATE_JOBS_SQL, UPDATE_SLOTS_SQL]);
      await applyStatements(client, statements);
      const { rows } = await client.query(`SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'jl_jobs'`);
      expect(rows).toEqual([{ n_tup_upd: '1', n_tup_hot_upd: '1' }]);
      expect((await client.query(`SELECT status, attempts, worker_id FROM jl_jobs WHERE job_id = 'j3'`)).rows).toEqual([{ status: 'running', attempts: 1, worker_id: 'w1' }]);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it("the sweeper's one query (with its parameters: now in epoch ms, a limit) uses jl_slots_expiry and jl_jobs_due, and finds exactly the expired started leases and the due jobs", async () => {
    // No enable_seqscan = off: on tables this size the planner must prefer the indexes by itself.
    const counts = (await db.pool.query(`SELECT (SELECT count(*) FROM jl_jobs WHERE run_at IS NOT NULL)::int AS scheduled, (SELECT count(*) FROM jl_slots WHERE expires_at IS NOT NULL)::int AS started`)).rows[0];
    expect(counts.scheduled).toBeGreaterThan(3_000);
    expect(counts.started).toBeGreaterThan(1_000);
    const sweep = await plan(SWEEP_CANDIDATES_SQL, [NOW, 500, '', '', '']);
    // An index scan, an index-only scan, or a bitmap scan of the index: whichever, the index is what finds them.
    expect(sweep).toMatch(/(Index (Only )?Scan using jl_slots_expiry on jl_slots|Bitmap Index Scan on jl_slots_expiry)/);
    expect(sweep).not.toMatch(/Seq Scan on jl_slots/);
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

  it("the read models' UPDATEs find each row by primary key under the flush's generic plans, whatever the batch", async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
      for (const [name, text, table, pkey] of [
        ['jobs', UPDATE_JOBS_SQL, 'jl_jobs', 'jl_jobs_pkey'],
        ['slots', UPDATE_SLOTS_SQL, 'jl_slots', 'jl_slots_pkey'],
      ] as const) {
        await client.query(`PREPARE test_${name} (jsonb, text[]) AS ${text}`);
        const { rows } = await client.query(`EXPLAIN EXECUTE test_${name}('[{"job_id": "j3"}]', ARRAY['j3'])`);
        const p = rows.map((r) => r['QUERY PLAN']).join('\n');
        expect(p, p).toMatch(new RegExp(`(Bitmap )?Index Scan (using|on) ${pkey}`));
        expect(p, p).not.toMatch(new RegExp(`Seq Scan on ${table}`));
      }
    } finally {
      await client.query('ROLLBACK');
      await client.query('DEALLOCATE ALL');
      client.release();
    }
  });
});

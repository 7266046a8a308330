import * as E from 'fp-ts/lib/Either.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { BY_OWN_COLUMN, BY_STREAM, REFERENCE } from '../../src/adapters/postgres/distribution.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import type { JobContext } from '../../src/index.js';
import { jobStream, keyStream } from '../../src/domain/streams.js';
import { WRITER, recordQuarantines } from '../../src/projections/quarantine.js';
import { createCitusDatabase, type CitusDatabase } from '../support/citus.js';
import { until } from '../support/until.js';

// The ledger on a Citus cluster (issue 24): migrate distributes it, and the one door of every
// write (the key writer's flush) routes each shard's streams apart; the reads across keys answer.

let db: CitusDatabase;
let ledger: Ledger;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createCitusDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 4 });
  ledger = await createLedger({ databaseUrl: db.url, logger: silentLogger });
});

afterAll(async () => {
  await ledger?.close();
  await pool?.end();
  await db?.drop();
});

/** The shards (ids) holding these streams. */
const shardsOf = async (streams: readonly string[]) =>
  new Set((await pool.query<{ shard: string }>(`SELECT get_shard_id_for_distribution_column('streams', s)::text AS shard FROM unnest($1::text[]) s`, [streams])).rows.map((r) => r.shard));

describe('migrate on a database with citus', () => {
  it('distributes every per-key table by its stream, colocated with streams; unique ids by id; the shared tables as reference tables', async () => {
    const { rows } = await pool.query<{ table: string; method: string; column: string | null; colocated: boolean }>(
      `SELECT logicalrelid::text AS table, partmethod AS method, column_to_column_name(logicalrelid, partkey) AS column,
              colocationid = (SELECT colocationid FROM pg_dist_partition WHERE logicalrelid = 'streams'::regclass) AS colocated
       FROM pg_dist_partition WHERE logicalrelid::text NOT LIKE 'appends%\\_w%' AND logicalrelid::text <> 'appends_archive_rows'`,
    );
    const by = new Map(rows.map((r) => [r.table, r]));
    for (const [table] of BY_STREAM) expect(by.get(table), table).toMatchObject({ method: 'h', column: 'stream', colocated: true });
    for (const [table, column] of BY_OWN_COLUMN) expect(by.get(table), table).toMatchObject({ method: 'h', column, colocated: false });
    for (const [table] of REFERENCE) expect(by.get(table), table).toMatchObject({ method: 'n' });
    expect(by.has('schema_migrations')).toBe(false);
  });
});

describe('the write path, shard by shard', () => {
  it('enqueues, admits and parks on keys of many shards at once, all or nothing, each limit held', async () => {
    const keys = Array.from({ length: 24 }, (_, i) => `c/${i}`);
    expect((await shardsOf(keys.map(keyStream))).size).toBeGreaterThan(4);
    const enqueued = await ledger.enqueueMany(keys.flatMap((key) => [0, 1, 2].map((n) => ({ name: 'work', key, limit: 2, jobId: `${key}-${n}` }))));
    expect(enqueued.map((e) => e.status).sort()).toEqual([...Array(48).fill('acquired'), ...Array(24).fill('parked')]);
    for (const key of keys) {
      const { state } = await ledger.keyState(key);
      expect([state.holding, Object.values(state.jobs).filter((j) => j.status === 'parked').length]).toEqual([2, 1]);
    }
    // The read models, on every shard.
    const { rows } = await pool.query<{ status: string; n: number }>(`SELECT status, count(*)::int AS n FROM jl_jobs GROUP BY status ORDER BY status`);
    expect(rows).toEqual([{ status: 'holding', n: 48 }, { status: 'parked', n: 24 }]);
  });

  it('a completion hands the slot to the parked job in the same append', async () => {
    const stream = keyStream('c/0');
    const lease = (await ledger.keyState('c/0')).state.jobs['c/0-0']!.lease!.leaseId;
    expect(E.isRight(await ledger.execute(stream, { type: 'Start', jobId: 'c/0-0', leaseId: lease, workerId: 'w' }))).toBe(true);
    const done = await ledger.execute(stream, { type: 'Complete', jobId: 'c/0-0', leaseId: lease });
    expect(E.isRight(done) && done.right.events.map((e) => e.type)).toEqual(['JobCompleted', 'SlotReleased', 'JobPromoted']);
  });

  it('a job without a key (its own stream) and a job under a further limit key on another shard', async () => {
    expect((await ledger.enqueue({ name: 'solo', jobId: 'solo-1' })).status).toBe('acquired');
    const guest = await ledger.enqueue({ name: 'capped', key: 'tenant/a', limit: 5, jobId: 'g-1', limits: [{ key: 'api', limit: 1 }] });
    const second = await ledger.enqueue({ name: 'capped', key: 'tenant/b', limit: 5, jobId: 'g-2', limits: [{ key: 'api' }] });
    expect([guest.status, second.status]).toEqual(['acquired', 'parked']);
    expect((await shardsOf([jobStream('solo-1'), keyStream('tenant/a'), keyStream('tenant/b'), keyStream('api')])).size).toBeGreaterThan(1);
  });

  it("an admission wakes its queue's readers: notified by the coordinator once committed (a worker's NOTIFY fails a two-phase commit)", async () => {
    const woken: string[] = [];
    const listening = ledger.queue.listen('wakes', () => woken.push('wakes'));
    try {
      // Listening once the subscription says so (a first wake on connecting).
      const deadline = Date.now() + 10_000;
      while (woken.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      woken.length = 0;
      // Keys on several shards, in one two-phase commit.
      await ledger.enqueueMany(Array.from({ length: 6 }, (_, i) => ({ name: 'w', key: `wake/${i}`, limit: 1, queue: 'wakes' })));
      while (woken.length === 0 && Date.now() < deadline + 10_000) await new Promise((r) => setTimeout(r, 20));
      expect(woken.length).toBeGreaterThan(0);
    } finally {
      await listening.stop();
    }
  });

  it('a worker reads its queue across the shards and runs each job once', async () => {
    const seen: string[] = [];
    const worker = ledger.worker({ queue: 'runs', concurrency: 4, handlers: { run: async (_args, ctx) => void seen.push(ctx.jobId) } });
    await ledger.enqueueMany(Array.from({ length: 30 }, (_, i) => ({ name: 'run', key: `r/${i % 10}`, limit: 1, queue: 'runs', jobId: `run-${i}` })));
    worker.start();
    try {
      const deadline = Date.now() + 60_000;
      while (seen.length < 30 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    } finally {
      await worker.stop();
    }
    expect(seen.sort()).toEqual(Array.from({ length: 30 }, (_, i) => `run-${i}`).sort());
  });

  it("a revoked lease reaches its worker (the coordinator's NOTIFY in a transaction written on a shard): the handler is aborted at once, heartbeat off, and its slot passes on", async () => {
    let aborted: unknown;
    const worker = ledger.worker({
      queue: 'revoke',
      heartbeat: false,
      handlers: {
        hold: async (_args: unknown, ctx: JobContext) => new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => ((aborted = ctx.signal.reason), resolve()))),
        next: async () => undefined,
      },
    });
    worker.start();
    try {
      await ledger.enqueue({ name: 'hold', key: 'revoked/1', limit: 1, leaseMs: 600_000, queue: 'revoke', jobId: 'held-c' });
      await ledger.enqueue({ name: 'next', key: 'revoked/1', queue: 'revoke', jobId: 'waiting-c' });
      const typesOf = async () => (await ledger.store.readStream(keyStream('revoked/1'))).map((r) => r.type);
      await until(typesOf, (ts) => ts.includes('JobStarted'), 'the job to start', 30_000);
      expect(await ledger.release({ key: 'revoked/1', jobId: 'held-c', by: 'ops' })).toEqual({ released: ['held-c'], stopping: ['held-c'] });
      // Nothing else could tell the handler: no renewals, a 10-minute lease.
      await until(async () => aborted, (reason) => reason !== undefined, 'the handler to be aborted', 30_000);
      expect(String(aborted)).toContain('held-c:1 was revoked or expired');
      await until(typesOf, (ts) => ts.filter((t) => t === 'JobCompleted').length === 1, 'the parked job to run', 30_000);
    } finally {
      await worker.stop();
    }
  });

  it("the sweeper's leadership is the coordinator's advisory lock: of two ledgers' sweepers one leads, and the other once the first stops", async () => {
    const other = await createLedger({ databaseUrl: db.url, logger: silentLogger, sweepIntervalMs: 100 });
    const sweeperOf = (l: Ledger) => (l as unknown as { sweeper: { isLeader: boolean } }).sweeper;
    try {
      ledger.start();
      await until(async () => sweeperOf(ledger).isLeader, Boolean, 'the first sweeper to lead', 30_000);
      other.start();
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect([sweeperOf(ledger).isLeader, sweeperOf(other).isLeader]).toEqual([true, false]);
      await ledger.stop();
      await until(async () => sweeperOf(other).isLeader, Boolean, 'the other sweeper to lead', 30_000);
      expect(sweeperOf(ledger).isLeader).toBe(false);
    } finally {
      await ledger.stop();
      await other.close();
    }
  });

  it('a given job id is one job across every shard: enqueued again on another key, it is a duplicate and nothing is written', async () => {
    expect((await ledger.enqueue({ name: 'once', key: 'given/a', jobId: 'given-1' })).status).toBe('acquired');
    const count = async () => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;
    const before = await count();
    expect((await ledger.enqueue({ name: 'once', key: 'given/b', jobId: 'given-1' })).status).toBe('duplicate');
    expect(await count()).toBe(before);
  });

  it("a reader's quarantine of a stream is recorded, and recorded again (ON CONFLICT DO UPDATE takes immutable functions only there)", async () => {
    const q = { stream: keyStream('c/3'), revision: 1, position: { commit: 1234n, prepare: 77n }, error: 'does not decode' };
    for (const error of ['does not decode', 'still does not decode']) {
      const s = recordQuarantines(WRITER, [{ ...q, error }]);
      await pool.query(s.text, s.values as unknown[]);
    }
    const { rows } = await pool.query<{ error: string; later: boolean }>(`SELECT error, last_seen >= first_seen AS later FROM jl_quarantined WHERE stream = $1`, [q.stream]);
    expect(rows).toEqual([{ error: 'still does not decode', later: true }]);
    await pool.query(`DELETE FROM jl_quarantined WHERE stream = $1`, [q.stream]);
  });

  it('archive is refused on a distributed ledger, naming why, and moves nothing', async () => {
    const count = async () => (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;
    const before = await count();
    await expect(ledger.archive({ before: Date.now() })).rejects.toMatchObject({ name: 'ArchiveDistributedError' });
    expect(await count()).toBe(before);
  });

  it('reads across keys: the page of keys, a key, a job, its history and explanation, the audit', async () => {
    const page = await ledger.keyPage({ unstartedAfterMs: 30_000 });
    expect(page.totals.keys).toBeGreaterThan(24);
    expect((await ledger.keyDetail('c/1'))?.holders).toHaveLength(2);
    expect((await ledger.jobs({ key: 'c/1' })).jobs).toHaveLength(3);
    expect((await ledger.explain({ jobId: 'c/1-2' })).status).toBe('parked');
    expect((await ledger.jobHistory({ jobId: 'c/0-0' })).events.map((e) => e.type)).toContain('JobCompleted');
    expect((await ledger.audit({ key: 'c/0' })).handoffs.length).toBeGreaterThan(0);
  });
});

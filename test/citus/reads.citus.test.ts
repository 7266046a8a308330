import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpServer } from '../../src/adapters/http/server.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { deadJobsOf } from '../../src/adapters/postgres/queries/dead-jobs.js';
import { jobStreamOf } from '../../src/adapters/postgres/queries/job-stream.js';
import { JOB_STATUS_FILTERS } from '../../src/adapters/postgres/queries/job-statuses.js';
import type { KeyDetail } from '../../src/adapters/postgres/queries/key-detail.js';
import { KEY_SORTS } from '../../src/adapters/postgres/queries/key-page-options.js';
import type { KeyPageQuery } from '../../src/adapters/postgres/queries/key-page.js';
import { LEASE_GRACE_SQL } from '../../src/adapters/postgres/queries/lease-grace.js';
import { readLedgerMetrics, readLedgerSize, type LedgerMetrics } from '../../src/adapters/postgres/queries/ledger-metrics.js';
import type { JobFilter, JobRow } from '../../src/adapters/postgres/queries/list-jobs.js';
import type { QueueRow } from '../../src/adapters/postgres/queries/queues.js';
import { rowCounts } from '../../src/adapters/postgres/queries/replay-counts.js';
import { SWEEP_CANDIDATES_SQL } from '../../src/adapters/postgres/queries/sweep-candidates.js';
import type { WorkerRow } from '../../src/adapters/postgres/queries/workers.js';
import { Sweeper } from '../../src/adapters/worker/sweeper.js';
import type { Worker } from '../../src/adapters/worker/worker.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createCitusDatabase, type CitusDatabase } from '../support/citus.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { until } from '../support/until.js';

// Every read across keys on a distributed ledger (issue 24): one ledger built through the public
// API on a Citus cluster and on one PostgreSQL, with one clock and one random source; each read
// must answer the same on both. What differs by nature (transaction ids, the database's clock,
// bytes on disk) is compared for what it must say, not value for value.

// The one PostgreSQL the answers are compared with: a database of its own on the machine's
// (createTestDatabase finds the server by this variable outside the int project).
process.env.JOBLEDGER_TEST_DATABASE_URL ??= 'postgres://postgres@127.0.0.1:5432/postgres';

const T0 = Date.UTC(2026, 10, 30, 3, 0, 0);
const SEC = 1_000;
/** When everything is read: t1's lease and run-1's ran out, t4 is due, the admissions nobody started are past the page's threshold. */
const LATER = T0 + 120 * SEC;
const KEYS = ['api', 'bad', 'healed', 'one', 'queue:capped', 'tenant/a', 'tenant/b', 'two', 'w'];
const TOKEN = 'reads-token';

interface Built {
  readonly ledger: Ledger;
  readonly pool: pg.Pool;
  readonly app: FastifyInstance;
  /** The worker's blocked handler returns: run-1 completes. */
  readonly release: () => void;
  readonly worker: Worker;
  close(): Promise<void>;
}

/**
 * The ledger both databases hold: keys of limit 1 and 2 with parked, scheduled and started jobs, a
 * queue capped at 2 (unkeyed jobs, one waiting in the cap's line), jobs without a key, a job under
 * a further limit key and one waiting there, a paused key, a quarantined key, the lease grace of
 * one whose quarantine ended, and a live worker running one job after another died (maxAttempts 1).
 */
const build = async (url: string): Promise<Built> => {
  let now = T0;
  const at = (time: number) => {
    now = time;
  };
  const ledger = await createLedger({ databaseUrl: url, logger: silentLogger, clock: () => now, random: () => 0.5, queues: { capped: { maxConcurrent: 2 } } });
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => undefined);
  await ledger.enqueueMany(['bad', 'healed'].map((key) => ({ name: 'sync', key, limit: 1, jobId: `${key}-1` })));
  // What the key writer and a projection's runner record of a stream with an event they cannot
  // decode, and what the end of a quarantine leaves: written here as they write them.
  await pool.query(
    `INSERT INTO jl_quarantined (stream, reader, revision, position, commit_id, error, first_seen, last_seen)
     VALUES ('key:bad', 'writer', 2, 7, '1234', 'JobTeleported does not decode', to_timestamp($1::float8 / 1000), to_timestamp($2::float8 / 1000)),
            ('key:bad', 'projection:read_models', 3, 9, '1240', 'JobVanished does not decode', to_timestamp($2::float8 / 1000), to_timestamp($2::float8 / 1000))`,
    [T0, T0 + SEC],
  );
  await pool.query(`INSERT INTO jl_lease_grace (stream, since_ms) VALUES ('key:healed', $1)`, [T0]);

  await ledger.enqueue({ name: 'sync', key: 'one', limit: 1, jobId: 'o1' });
  at(T0 + SEC);
  await ledger.enqueue({ name: 'sync', key: 'one', jobId: 'o2' });
  await ledger.enqueue({ name: 'report', key: 'one', jobId: 'o3', priority: 1 });
  at(T0 + 2 * SEC);
  await ledger.enqueueMany([
    { name: 'sync', key: 'two', limit: 2, leaseMs: 2 * SEC, jobId: 't1' },
    { name: 'sync', key: 'two', jobId: 't2' },
    { name: 'sync', key: 'two', jobId: 't3' },
    { name: 'later', key: 'two', jobId: 't4', delayMs: 60 * SEC },
  ]);
  // Started by a worker that never announced itself: a holder whose worker is gone, then expired.
  const lease = (await ledger.keyState('two')).state.jobs['t1']!.lease!.leaseId;
  await ledger.execute(keyStream('two'), { type: 'Start', jobId: 't1', leaseId: lease, workerId: 'worker-x' });
  at(T0 + 3 * SEC);
  await ledger.enqueueMany([
    { name: 'solo', jobId: 'solo-1' },
    { name: 'solo', jobId: 'solo-2', queue: 'other' },
  ]);
  await ledger.enqueueMany(['c1', 'c2', 'c3'].map((jobId) => ({ name: 'capped', jobId, queue: 'capped' })));
  await ledger.enqueue({ name: 'call', key: 'tenant/a', limit: 5, jobId: 'g1', limits: [{ key: 'api', limit: 1 }] });
  await ledger.enqueue({ name: 'call', key: 'tenant/b', limit: 5, jobId: 'g2', limits: [{ key: 'api' }] });
  await ledger.pause({ key: 'one', by: 'op', reason: 'maintenance' });

  at(T0 + 4 * SEC);
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const started: string[] = [];
  const worker = ledger.worker({
    queue: 'runs',
    concurrency: 2,
    workerId: 'worker-1',
    // No renewals: the ledger's events (and their count) are the same on both.
    heartbeat: false,
    handlers: {
      block: async (_args, ctx) => {
        started.push(ctx.jobId);
        await released;
      },
      boom: async () => {
        throw new Error('boom');
      },
    },
  });
  await ledger.enqueueMany([
    { name: 'block', key: 'w', limit: 2, queue: 'runs', jobId: 'run-1' },
    { name: 'boom', key: 'w', queue: 'runs', jobId: 'dead-1', maxAttempts: 1 },
  ]);
  worker.start();
  await until(async () => [started.length, await ledger.finishedJobs(['dead-1'])], ([s, dead]) => s === 1 && dead === 1, 'run-1 running and dead-1 dead');
  at(LATER);
  const app = await createHttpServer({ ledger, token: TOKEN });
  return {
    ledger,
    pool,
    app,
    release,
    worker,
    close: async () => {
      release();
      await app.close();
      await ledger.close();
      await pool.end();
    },
  };
};

let citusDb: CitusDatabase;
let plainDb: TestDatabase;
let citus: Built;
let plain: Built;

beforeAll(async () => {
  citusDb = await createCitusDatabase();
  plainDb = await createTestDatabase();
  citus = await build(citusDb.url);
  plain = await build(plainDb.url);
});

afterAll(async () => {
  await citus?.close();
  await plain?.close();
  await citusDb?.drop();
  await plainDb?.drop();
});

/** The read on both ledgers, the answers (normalized) equal; the distributed one's. */
const same = async <T>(read: (b: Built) => Promise<T>, normalize: (t: T) => unknown = (t) => t): Promise<T> => {
  const answer = await read(citus);
  expect(normalize(answer)).toEqual(normalize(await read(plain)));
  return answer;
};

/** Without what the database's clock makes (a heartbeat's time, an age). */
const presenceOf = (w: WorkerRow) => ({ ...w, startedAt: typeof w.startedAt, lastSeen: typeof w.lastSeen, seenAgoMs: typeof w.seenAgoMs });
const queueOf = (q: QueueRow) => ({ ...q, oldestAgeMs: q.oldestAgeMs === null ? null : typeof q.oldestAgeMs });
const detailOf = (d: KeyDetail | null) => d && { ...d, holders: d.holders.map((h) => ({ ...h, workerLastSeen: typeof h.workerLastSeen })) };
/** Metrics without ages on the database's clock; sizes apart (sizeOf). */
const figuresOf = (m: LedgerMetrics) => {
  const ranked = (keys: LedgerMetrics['topParked']) => keys.map((k) => ({ ...k, oldestParkedSeconds: typeof k.oldestParkedSeconds }));
  const { ledgerEvents: _e, ledgerBytes: _b, archivedEvents: _ae, archivedBytes: _ab, ...rest } = m;
  return { ...rest, oldestParkedSeconds: typeof m.oldestParkedSeconds, topParked: ranked(m.topParked), topWaiting: ranked(m.topWaiting) };
};

/** Every page of jobs the filter names, 2 at a time: the pages' rows and how many pages. */
const allJobs = async (b: Built, filter: JobFilter) => {
  const jobs: JobRow[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const page = await b.ledger.jobs({ ...filter, limit: 2, ...(cursor === undefined ? {} : { cursor }) });
    jobs.push(...page.jobs);
    cursor = page.nextCursor ?? undefined;
    pages++;
  } while (cursor !== undefined && pages < 50);
  return { jobs, pages };
};

it('the ledger is distributed on the cluster, and not on the plain PostgreSQL', async () => {
  const distributed = async (b: Built) => {
    if ((await b.pool.query(`SELECT to_regclass('pg_dist_partition') AS t`)).rows[0].t === null) return false;
    return (await b.pool.query(`SELECT count(*)::int AS n FROM pg_dist_partition WHERE logicalrelid = 'jl_jobs'::regclass`)).rows[0].n === 1;
  };
  expect([await distributed(citus), await distributed(plain)]).toEqual([true, false]);
});

describe('the keys', () => {
  it('keys(): every key, with its holders by state, quarantine and pause', async () => {
    const keys = await same((b) => b.ledger.keys());
    expect(keys.map((k) => k.key)).toEqual(KEYS);
    expect(keys.find((k) => k.key === 'bad')?.quarantine).toMatchObject({ revision: 2, position: '1234/7', readers: ['projection:read_models', 'writer'] });
    expect(keys.find((k) => k.key === 'one')?.paused).toMatchObject({ by: 'op', reason: 'maintenance' });
    expect(keys.find((k) => k.key === 'api')).toMatchObject({ inUse: 1, parked: 1 });
  });

  it('keyPage(): every order both ways, each filter, page by page; the totals and the attention groups', async () => {
    const page = (query: Omit<KeyPageQuery, 'unstartedAfterMs'>) => same((b) => b.ledger.keyPage({ ...query, unstartedAfterMs: 30 * SEC }, LATER));
    const whole = await page({});
    // A key two readers stopped at is one key (it was two rows of the page).
    expect(whole.totals.keys).toBe(KEYS.length);
    expect(whole.keys.map((k) => k.key).sort()).toEqual(KEYS);
    expect(whole.attention.find((g) => g.cause === 'key-quarantined')).toMatchObject({ count: 1, first: [{ key: 'bad' }] });
    expect(whole.attention.map((g) => g.cause)).toEqual(['holders-unstarted', 'holders-expired', 'key-quarantined']);
    expect(whole.unstartedQueues).toEqual(['capped', 'default', 'other']);
    for (const sort of Object.keys(KEY_SORTS) as (keyof typeof KEY_SORTS)[]) {
      for (const dir of ['asc', 'desc'] as const) {
        const keys: string[] = [];
        for (let offset = 0; offset < KEYS.length; offset += 5) keys.push(...(await page({ sort, dir, limit: 5, offset })).keys.map((k) => k.key));
        expect(keys.sort(), `${sort} ${dir}`).toEqual(KEYS);
      }
    }
    expect((await page({ match: 'T' })).keys.map((k) => k.key)).toEqual(['two', 'tenant/a', 'tenant/b']);
    for (const atLimit of [true, false]) await page({ atLimit });
    for (const attention of [true, false]) await page({ attention });
    expect((await page({ match: 'nothing like it' })).matched).toBe(0);
  });

  it('keyDetail(): each key, its holders (guests under their homes\' leases), line, schedule and what its parked jobs wait on', async () => {
    for (const key of [...KEYS, 'nobody']) await same((b) => b.ledger.keyDetail(key, LATER), detailOf);
    await same((b) => b.ledger.keyDetail('two', LATER, 1), detailOf);
    expect((await citus.ledger.keyDetail('tenant/b', LATER))?.parked).toMatchObject([{ jobId: 'g2', waitsOn: [{ key: 'api', limit: 1, inUse: 1 }] }]);
    expect((await citus.ledger.keyDetail('queue:capped', LATER))?.holders.map((h) => h.home)).toEqual(['job:c1', 'job:c2']);
  });
});

describe('the jobs', () => {
  it('jobs(): by each filter, page by page with the cursor', async () => {
    const filters: JobFilter[] = [{}, { key: 'two' }, { name: 'sync' }, { queue: 'capped' }, ...JOB_STATUS_FILTERS.map((status) => ({ status })), { key: 'w', status: 'dead' }];
    for (const filter of filters) await same((b) => allJobs(b, filter));
    expect((await allJobs(citus, {})).jobs).toHaveLength(18);
    expect((await allJobs(citus, { status: 'running' })).jobs.map((j) => j.jobId)).toEqual(['run-1', 't1']);
  });

  it("finishedJobs, the dead jobs of a key, a job's stream, its explanation, history and audit", async () => {
    expect(await same((b) => b.ledger.finishedJobs(['dead-1', 'run-1', 'o1', 'nobody']))).toBe(1);
    expect(await same((b) => deadJobsOf(b.pool, 'w'))).toEqual(['dead-1']);
    expect(await same((b) => jobStreamOf(b.pool, 'c1'))).toBe('job:c1');
    expect(await same((b) => jobStreamOf(b.pool, 'g2'))).toBe(keyStream('tenant/b'));
    // api's line read from the read models (limitLine), routed to its shard: g2 waits behind g1's slot.
    const explained = await same((b) => b.ledger.explain({ jobId: 'g2' }));
    expect(explained.limits[1]).toMatchObject({ key: 'api', holding: 1, place: { n: 1, of: 1 }, holders: [{ jobId: 'g1', home: 'tenant/a' }] });
    await same((b) => b.ledger.jobHistory({ jobId: 'g2' }));
    await same((b) => b.ledger.audit({ key: 'api' }));
  });
});

describe('workers, queues, the version and the ledger', () => {
  it('workers() and queues()', async () => {
    expect(await same((b) => b.ledger.workers(), (ws) => ws.map(presenceOf))).toMatchObject([{ id: 'worker-1', state: 'live', holding: 1 }]);
    const queues = await same((b) => b.ledger.queues(), (qs) => qs.map(queueOf));
    expect(queues.map((q) => q.queue)).toEqual(['capped', 'default', 'other', 'runs']);
  });

  it("version(): what the polls' tags are made of", async () => {
    const version = await same(
      (b) => b.ledger.version(LATER, 30 * SEC),
      ({ head: _h, pending: _p, beats: _b, ...rest }) => rest,
    );
    expect(version).toMatchObject({ expired: 2, unstarted: 9 });
    expect(version.head).toMatch(/^\d+\/\d+$/);
  });

  it('the row counts of replay and the ledger\'s events', async () => {
    await same((b) => rowCounts(b.pool, ['jl_jobs', 'jl_keys', 'jl_limit_jobs', 'jl_quarantined']));
    expect(await same((b) => b.ledger.eventCount())).toBeGreaterThan(30);
  });

  it("the ledger's size and the metrics: a distributed ledger's from its shards", async () => {
    const counted = async (b: Built) => Number((await b.pool.query(`SELECT coalesce(sum(cardinality(types)), 0) AS n FROM appends`)).rows[0].n);
    const events = await counted(citus);
    expect(events).toBe(await counted(plain));
    const size = await readLedgerSize(citus.pool, { distributed: true });
    expect(size).toMatchObject({ events, archivedEvents: 0 });
    expect(await readLedgerSize(plain.pool)).toMatchObject({ events, archivedEvents: 0 });
    const { rows } = await citus.pool.query(`SELECT sum(citus_total_relation_size(relid))::float8 AS n FROM pg_partition_tree('appends')`);
    expect(size.bytes).toBe(rows[0].n);
    expect(size.archivedBytes).toBeGreaterThan(0);

    const metrics = await readLedgerMetrics(citus.pool, [], { distributed: true });
    expect(figuresOf(metrics)).toEqual(figuresOf(await plain.ledger.metrics([])));
    expect(metrics).toMatchObject({ keys: KEYS.length, quarantinedStreams: 1, pausedKeys: 1, ledgerEvents: events, ledgerBytes: size.bytes, projectionLag: [] });
    // Through the ledger (its reader does not say the ledger is distributed): the same figures.
    expect(figuresOf(await citus.ledger.metrics([]))).toEqual(figuresOf(metrics));
    await expect(readLedgerMetrics(citus.pool, ['read_models'], { distributed: true })).rejects.toThrow(/inline/);
  });

  it("the sweeper's candidates (its statement, as it runs it) and lease grace", async () => {
    const candidates = (after: string, limit = 500) => same(async (b) => (await b.pool.query(SWEEP_CANDIDATES_SQL, [LATER, limit, after, after, after])).rows);
    expect(await candidates('')).toEqual([
      { kind: 'expired', stream: 'key:two' },
      { kind: 'expired', stream: 'key:w' },
      { kind: 'due', stream: 'key:two' },
      { kind: 'stranded', stream: 'key:tenant/b' },
    ]);
    expect(await candidates('key:two', 1)).toEqual([{ kind: 'expired', stream: 'key:w' }]);
    expect(await same(async (b) => (await b.pool.query(LEASE_GRACE_SQL)).rows)).toEqual([{ stream: 'key:healed', since_ms: T0 }]);
  });
});

describe('the HTTP API the page reads, and /metrics', () => {
  const get = async (b: Built, url: string) => {
    const response = await b.app.inject({ method: 'GET', url, headers: { host: '127.0.0.1', authorization: `Bearer ${TOKEN}` } });
    return { status: response.statusCode, type: String(response.headers['content-type']), body: response.body };
  };
  const json = (url: string, normalize: (body: any) => unknown = (body) => body) =>
    same(
      async (b) => get(b, url),
      (r) => ({ status: r.status, body: normalize(JSON.parse(r.body)) }),
    );

  it('every GET of the API answers as on one PostgreSQL', async () => {
    // The overview's card of the ledger's size: bytes on disk differ by layout; its events are the same (the shards' figures).
    const overview = await json('/api/keys', ({ totals: { ledger, ...totals }, ...body }) => ({ ...body, totals, events: ledger.events }));
    expect(overview.status).toBe(200);
    for (const sort of Object.keys(KEY_SORTS)) await json(`/api/keys?sort=${sort}&limit=3&offset=2`, ({ totals: { ledger: _, ...totals }, ...body }) => ({ ...body, totals }));
    await json('/api/keys?match=t&atLimit=true&attention=true', ({ totals: { ledger: _, ...totals }, ...body }) => ({ ...body, totals }));
    for (const key of KEYS) expect((await json(`/api/keys/detail?key=${encodeURIComponent(key)}`, detailOf)).status).toBe(200);
    expect((await json('/api/keys/detail?key=nobody')).status).toBe(404);
    expect((await json('/api/jobs?status=holding&limit=3')).status).toBe(200);
    await json('/api/jobs?key=two');
    expect((await json('/api/jobs/explain?jobId=g2')).status).toBe(200);
    expect((await json('/api/jobs/history?jobId=run-1')).status).toBe(200);
    expect((await json('/api/audit?key=api')).status).toBe(200);
    const workers = await json('/api/workers', (body) => ({ ...body, workers: body.workers.map(presenceOf) }));
    expect(JSON.parse(workers.body).workers[0]).toMatchObject({ id: 'worker-1', runningJobs: [{ jobId: 'run-1', key: 'w' }] });
    expect((await json('/api/queues', (body) => ({ ...body, queues: body.queues.map(queueOf) }))).status).toBe(200);
    expect((await get(citus, '/')).status).toBe(200);
  });

  it('/metrics: every series but ages and sizes as on one PostgreSQL', async () => {
    const DIFFERING = /_seconds|^jobledger_ledger_(events|bytes)|^jobledger_sweeper|^process_|^nodejs_/;
    const samples = (text: string) =>
      Object.fromEntries(
        text
          .split('\n')
          .filter((line) => line !== '' && !line.startsWith('#') && !DIFFERING.test(line))
          .map((line) => [line.slice(0, line.lastIndexOf(' ')), Number(line.slice(line.lastIndexOf(' ') + 1))]),
      );
    const metrics = await same(
      async (b) => get(b, '/metrics'),
      (r) => ({ status: r.status, samples: samples(r.body) }),
    );
    expect(metrics.status).toBe(200);
    expect(samples(metrics.body)).toMatchObject({ jobledger_keys: KEYS.length, jobledger_keys_quarantined: 1, 'jobledger_jobs{status="dead"}': 1 });
  });
});

// Last: these write.
describe('reads around writes', () => {
  it("pending: a coordinator transaction running below the newest row's id is listed (the snapshot read where the ids are made)", async () => {
    for (const b of [citus, plain]) {
      const running = await b.pool.connect();
      try {
        await running.query('BEGIN');
        const { xid } = (await running.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid')).rows[0]!;
        await b.ledger.enqueue({ name: 'sync', key: 'late', jobId: 'late-1' });
        const version = await b.ledger.version(LATER, 30 * SEC);
        expect(BigInt(version.head!.split('/')[0]!)).toBeGreaterThan(BigInt(xid));
        expect(version.pending.split(',')).toContain(xid);
      } finally {
        await running.query('ROLLBACK');
        running.release();
      }
    }
  });

  it('a sweep: the same candidates handled, the same keys after', async () => {
    const swept = await same(async (b) => {
      // run-1 done first: its worker would otherwise see its lease expired by the sweep at a moment of its own.
      b.release();
      await b.worker.stop();
      // The sweep reads the writer's quarantines again first: key:bad's events decode, so its quarantine ends (a grace for its leases).
      return new Sweeper(b.ledger, b.pool, silentLogger, { clock: () => LATER, random: () => 0.5 }).sweep();
    });
    expect(swept).toMatchObject({ expired: 1, admitted: 1 });
    await same((b) => b.ledger.keys());
    await same((b) => b.ledger.keyPage({ unstartedAfterMs: 30 * SEC }, LATER));
  });
});

import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { decideAcross } from '../../src/domain/decide/index.js';
import { LimitConflictError, QueueCapConflictError } from '../../src/domain/errors.js';
import { Scratch, draftOf, holders, jobsIn, type KeyState } from '../../src/domain/key-state.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';

// Issue 11, parts 1 and 2, through the ledger on real PostgreSQL: a job under further limit keys
// holds a slot in its key and in every limit key at once, or waits in all their lines, decided in
// one transaction across their streams; queue caps are such a limit key, set from configuration.

let db: MigratedDatabase;
let ledger: Ledger;

beforeAll(async () => {
  db = await createMigratedDatabase(6, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

const eventCount = async (): Promise<number> => (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;
const state = async (key: string): Promise<KeyState> => (await ledger.keyState(key)).state;
const statusIn = async (key: string, jobId: string) => (await state(key)).jobs[jobId]?.status;

/** Starts and completes a holder the way a worker does, through the ledger's one writer. */
const run = async (key: string, jobId: string): Promise<void> => {
  const lease = (await state(key)).jobs[jobId]?.lease;
  if (!lease) throw new Error(`${jobId} holds no slot on ${key}`);
  const started = await ledger.execute(keyStream(key), { type: 'Start', jobId, leaseId: lease.leaseId, workerId: 'w' });
  expect(E.isRight(started)).toBe(true);
  const done = await ledger.execute(keyStream(key), { type: 'Complete', jobId, leaseId: lease.leaseId });
  expect(E.isRight(done)).toBe(true);
};

describe('a job under further limits', () => {
  it('takes a slot in its key and in each limit key in one append, with the same lease', async () => {
    const [r] = await ledger.enqueueMany([{ name: 'sync', key: 'sl1:a', limit: 2, limits: [{ key: 'sl1:tenant', limit: 1 }, { key: 'sl1:api', limit: 5 }], jobId: 'sl1-1' }]);
    expect(r!.status).toBe('acquired');
    const lease = (await state('sl1:a')).jobs['sl1-1']!.lease!.leaseId;
    for (const key of ['sl1:tenant', 'sl1:api']) {
      const s = await state(key);
      expect(holders(s).map((h) => [h.jobId, h.lease!.leaseId, h.home])).toEqual([['sl1-1', lease, keyStream('sl1:a')]]);
    }
    expect((await state('sl1:tenant')).limit).toBe(1);
    expect((await state('sl1:api')).limit).toBe(5);
    const { rows } = await db.pool.query<{ stream: string; transaction_id: string }>(`SELECT DISTINCT stream, transaction_id::text FROM events WHERE stream LIKE 'key:sl1:%'`);
    expect(new Set(rows.map((r) => r.transaction_id)).size).toBe(1);
  });

  it('waits in every line when one limit is full, and is promoted from the limit key that frees last', async () => {
    await ledger.enqueue({ name: 'sync', key: 'sl2:a', limit: 1, limits: [{ key: 'sl2:t', limit: 1 }], jobId: 'sl2-a' });
    const [b] = await ledger.enqueueMany([{ name: 'sync', key: 'sl2:b', limit: 1, limits: [{ key: 'sl2:t' }], jobId: 'sl2-b' }]);
    expect(b!.status).toBe('parked');
    expect(jobsIn(await state('sl2:t'), 'parked').map((j) => [j.jobId, j.home])).toEqual([['sl2-b', keyStream('sl2:b')]]);
    await run('sl2:a', 'sl2-a');
    // The release frees sl2:t; b's home is another key, served by the writer's follow-up.
    await until(() => statusIn('sl2:b', 'sl2-b'), (s) => s === 'holding', 'sl2-b promoted at home');
    expect((await state('sl2:t')).jobs['sl2-b']?.status).toBe('holding');
    expect(holders(await state('sl2:a'))).toEqual([]);
  });

  it('regression: a limit key named with another limit than its recorded one is refused naming that key, and nothing is written', async () => {
    await ledger.enqueue({ name: 'sync', key: 'sl3:a', limits: [{ key: 'sl3:t', limit: 2 }], jobId: 'sl3-1' });
    const before = await eventCount();
    const refused = await ledger.enqueue({ name: 'sync', key: 'sl3:b', limits: [{ key: 'sl3:t', limit: 3 }], jobId: 'sl3-2' }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LimitConflictError);
    expect(refused).toMatchObject({ key: 'sl3:t', recorded: 2, requested: 3 });
    expect(await eventCount()).toBe(before);
  });

  it('refuses its own key as a further limit, naming the field, and writes nothing', async () => {
    const before = await eventCount();
    await expect(ledger.enqueue({ name: 'sync', key: 'sl4:a', limits: [{ key: 'sl4:a' }] })).rejects.toMatchObject({ name: 'ValidationError', field: 'limits[0].key' });
    await expect(ledger.enqueue({ name: 'sync', key: 'sl4:a', limits: [{ key: 'sl4:t' }, { key: 'sl4:t' }] })).rejects.toMatchObject({ name: 'ValidationError', field: 'limits' });
    expect(await eventCount()).toBe(before);
  });
});

describe('the second step of a release, after its writer died', () => {
  it('regression: a release whose process died before serving the line of a shared limit key leaves no one stranded: the sweeper serves it', async () => {
    await ledger.enqueue({ name: 'sync', key: 'sb:a', limits: [{ key: 'sb:t', limit: 1 }], jobId: 'sb-a' });
    await ledger.enqueue({ name: 'sync', key: 'sb:b', limits: [{ key: 'sb:t' }], jobId: 'sb-b' });
    const lease = (await state('sb:a')).jobs['sb-a']!.lease!.leaseId;
    await ledger.execute(keyStream('sb:a'), { type: 'Start', jobId: 'sb-a', leaseId: lease, workerId: 'w' });
    // What a writer without sb:b's stream at hand decides and writes, then dies: the release on
    // sb:a and sb:t, and a FillSlots of sb:t it never gets to.
    const at = { [keyStream('sb:a')]: await ledger.keyState('sb:a'), [keyStream('sb:t')]: await ledger.keyState('sb:t') };
    const outcome = decideAcross({ type: 'Complete', jobId: 'sb-a', leaseId: lease }, keyStream('sb:a'), (s) => (at[s] ? new Scratch(draftOf(at[s]!.state)) : undefined), Date.now());
    if (outcome.tag !== 'decided' || E.isLeft(outcome.result)) throw new Error(`unexpected ${JSON.stringify(outcome)}`);
    expect([...outcome.fillLater.keys()]).toEqual([keyStream('sb:t')]);
    await ledger.store.appendMany(
      [...outcome.result.right].map(([stream, events]) => ({ stream, expected: at[stream]!.revision, events: events.map((e) => ({ type: e.type, data: e.data })) })),
    );
    expect(await statusIn('sb:b', 'sb-b')).toBe('parked');
    expect((await state('sb:t')).holding).toBe(0);
    const sweeping = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger, sweepIntervalMs: 50 });
    sweeping.start();
    await until(() => statusIn('sb:b', 'sb-b'), (s) => s === 'holding', 'the sweeper to promote the stranded job');
    await sweeping.close();
    const served = (await ledger.store.readStream(keyStream('sb:t'))).filter((e) => e.type === 'LimitHeld' && (e.data as { jobId: string }).jobId === 'sb-b');
    expect(served.map((e) => e.metadata?.by)).toEqual(['sweeper']);
  });
});

describe('queue caps live in the ledger (issue 21, item 2; invariant 10)', () => {
  const open = (queues?: Record<string, number>) =>
    createLedger({ pool: db.pool, migrate: false, logger: silentLogger, ...(queues === undefined ? {} : { queues: Object.fromEntries(Object.entries(queues).map(([q, n]) => [q, { maxConcurrent: n }])) }) });
  const limitEvents = async (queue: string) =>
    (await ledger.store.readStream(keyStream(`queue:${queue}`))).filter((e) => e.type === 'KeyLimitSet').map((e) => [(e.data as { limit: number }).limit, (e.data as { by: string }).by]);

  it('the first process to name a cap records it, by config; a process naming the same records nothing; jobs of the queue are held to it', async () => {
    const first = await open({ builds: 2 });
    expect(await limitEvents('builds')).toEqual([[2, 'config']]);
    const results = await first.enqueueMany([1, 2, 3].map((i) => ({ name: 'build', key: `qc:repo-${i}`, queue: 'builds', jobId: `qc-${i}` })));
    expect(results.map((r) => r.status)).toEqual(['acquired', 'acquired', 'parked']);
    await first.close();
    await (await open({ builds: 2 })).close();
    expect(await limitEvents('builds')).toEqual([[2, 'config']]);
  });

  it('issue 21 #2: a process opened without the caps (a producer, serve, a one-off CLI enqueue) enqueues under the ledger\'s cap all the same', async () => {
    const capped = await open({ mail: 1 });
    const plain = await open();
    try {
      const fromCapped = await capped.enqueueMany([1, 2].map((i) => ({ name: 'send', key: `qp:a${i}`, queue: 'mail', jobId: `qp-c${i}` })));
      const fromPlain = await plain.enqueueMany([1, 2].map((i) => ({ name: 'send', key: `qp:b${i}`, queue: 'mail', jobId: `qp-p${i}` })));
      // Measured before the fix: acquired, parked, then acquired, acquired (3 holding on a cap of 1).
      expect([...fromCapped, ...fromPlain].map((r) => r.status)).toEqual(['acquired', 'parked', 'parked', 'parked']);
      expect((await plain.keyDetail('queue:mail'))?.holders.map((h) => h.jobId)).toEqual(['qp-c1']);
      // Unkeyed jobs and retried ones are arrivals too.
      expect((await plain.enqueue({ name: 'send', queue: 'mail', jobId: 'qp-solo' })).status).toBe('parked');
    } finally {
      await capped.close();
      await plain.close();
    }
  });

  it('issue 21 #2: a process whose configuration names another cap is refused, clearly, and writes nothing; changing a cap is set-limit, recorded with who', async () => {
    await (await open({ reports: 5 })).close();
    const before = (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;
    const refused = open({ reports: 1 });
    await expect(refused).rejects.toThrow(QueueCapConflictError);
    await expect(refused).rejects.toThrow('queue "reports" has cap 5 in the ledger, not 1');
    await expect(refused).rejects.toThrow('jobledger set-limit --key queue:reports --limit 1');
    expect((await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n).toBe(before);
    // Measured before the fix: each open wrote its own cap (5, then 1, then 5 again).
    expect(await limitEvents('reports')).toEqual([[5, 'config']]);
    await ledger.setLimit({ key: 'queue:reports', limit: 1, by: 'alice' });
    expect(await limitEvents('reports')).toEqual([[5, 'config'], [1, 'alice']]);
    await (await open({ reports: 1 })).close();
  });

  it('a cap raised by an operator admits the parked jobs of the queue at once', async () => {
    await (await open({ raise: 1 })).close();
    const results = await ledger.enqueueMany([1, 2].map((i) => ({ name: 'build', key: `qr:repo-${i}`, queue: 'raise', jobId: `qr-${i}` })));
    expect(results.map((r) => r.status)).toEqual(['acquired', 'parked']);
    await ledger.setLimit({ key: 'queue:raise', limit: 2, by: 'alice' });
    await until(() => statusIn('qr:repo-2', 'qr-2'), (s) => s === 'holding', 'the raised cap admits the parked build');
  });

  it('refuses a bad cap naming the field, before opening anything', async () => {
    await expect(createLedger({ pool: db.pool, migrate: false, logger: silentLogger, queues: { builds: { maxConcurrent: 0 } } })).rejects.toMatchObject({ field: 'queues.builds.maxConcurrent' });
    await expect(createLedger({ pool: db.pool, migrate: false, logger: silentLogger, queues: { 'no spaces': { maxConcurrent: 1 } } })).rejects.toMatchObject({ field: 'queues.no spaces' });
  });
});

describe('concurrent writers on overlapping limit sets (FAILURE-MODES #1, #6)', () => {
  it('three ledgers (three writers, three pools) with workers never put a key over its limit, never hold only some limits of a job, never deadlock, and leave no one waiting', async () => {
    const LIMITS: Record<string, number> = { 'ov:t0': 2, 'ov:t1': 3, 'ov:api': 1 };
    const HOMES = ['ov:h0', 'ov:h1', 'ov:h2', 'ov:h3'];
    const ledgers = await Promise.all([0, 1, 2].map(() => createLedger({ databaseUrl: db.url, migrate: false, logger: silentLogger, poolSize: 4, sweepIntervalMs: 200 })));
    // Each run's interval and the keys it was under, timed in the handler itself.
    const runs: { keys: string[]; from: number; to: number }[] = [];
    const handlers = {
      ov: async (args: { keys: string[]; fail: boolean }, ctx: { attempt: number }) => {
        const from = performance.now();
        await new Promise((r) => setTimeout(r, 1 + Math.floor(Math.random() * 4)));
        runs.push({ keys: args.keys, from, to: performance.now() });
        if (args.fail && ctx.attempt === 1) throw new Error('first attempt fails');
      },
    };
    const workers = ledgers.map((l) => l.worker({ handlers, concurrency: 4, pollIntervalMs: 50 }));
    for (const l of ledgers) l.start();
    for (const w of workers) w.start();
    let n = 0;
    const jobs = () =>
      Array.from({ length: 20 }, () => {
        const i = n++;
        const home = HOMES[i % HOMES.length]!;
        // Overlapping sets, in every order of arrival: each job under 1-3 of the shared limit keys.
        const limits = Object.keys(LIMITS).filter((_, k) => ((i * 7 + k * 3) % 5) < 3 || k === i % 3);
        return { name: 'ov', key: home, limit: 2, maxAttempts: 3, jobId: `ov-${i}`, limits: limits.map((key) => ({ key, limit: LIMITS[key]! })), args: { keys: [home, ...limits], fail: i % 9 === 0 } };
      });
    await Promise.all(ledgers.map(async (l) => {
      for (let round = 0; round < 5; round++) await l.enqueueMany(jobs());
    }));
    const total = n;
    const done = await until(
      async () => (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM jl_jobs WHERE key LIKE 'ov:%' AND status = 'completed'`)).rows[0]!.n,
      (c) => c === total,
      'every job completed',
      60_000,
    );
    expect(done).toBe(total);
    await Promise.all(workers.map((w) => w.stop()));
    await Promise.all(ledgers.map((l) => l.close()));

    // Never over a limit, in the handlers' own time: at each start, the runs open under each key.
    for (const run of runs) {
      for (const key of run.keys) {
        const open = runs.filter((r) => r.keys.includes(key) && r.from <= run.from && r.to > run.from).length;
        expect(open, `${key} at ${run.from}`).toBeLessThanOrEqual(LIMITS[key] ?? 2);
      }
    }
    // In the ledger: each hold at home and on its limit keys in ONE transaction, under one lease, and so each release.
    const { rows } = await db.pool.query<{ stream: string; type: string; data: { jobId: string; leaseId?: string }; tx: string }>(
      `SELECT stream, type, data, transaction_id::text AS tx FROM events WHERE stream LIKE 'key:ov:%' ORDER BY global_position`,
    );
    const txOf = new Map<string, Set<string>>();
    const note = (what: string, tx: string) => txOf.set(what, (txOf.get(what) ?? new Set()).add(tx));
    for (const e of rows) {
      if (e.type === 'SlotAcquired' || e.type === 'JobPromoted' || e.type === 'LimitHeld') note(`hold ${e.data.leaseId}`, e.tx);
      if (e.type === 'SlotReleased' || e.type === 'LimitReleased') note(`release ${e.data.leaseId}`, e.tx);
    }
    const holds = rows.filter((e) => e.type === 'LimitHeld').length;
    expect(holds).toBeGreaterThan(total);
    for (const [what, txs] of txOf) expect(txs.size, what).toBe(1);
    // And every key's ledger, folded event by event, never over its limit.
    for (const stream of new Set(rows.map((e) => e.stream))) {
      const events = await ledger.store.readStream(stream);
      let holding = 0;
      let limit = 0;
      for (const e of events) {
        if (e.type === 'KeyLimitSet') limit = (e.data as { limit: number }).limit;
        if (e.type === 'SlotAcquired' || e.type === 'JobPromoted' || e.type === 'LimitHeld') holding++;
        if (e.type === 'SlotReleased' || e.type === 'LimitReleased') holding--;
        expect(holding, `${stream} at ${e.revision}`).toBeLessThanOrEqual(limit);
      }
      expect(holding, stream).toBe(0);
    }
    const left = await db.pool.query(`SELECT * FROM jl_limit_jobs WHERE key LIKE 'ov:%' UNION ALL SELECT stream, key, job_id, '', '', null, parked_at, priority, seq FROM jl_parked WHERE key LIKE 'ov:%'`);
    expect(left.rows).toEqual([]);
  }, 90_000);
});

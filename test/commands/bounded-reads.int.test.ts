import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { READ_JOB_EVENTS_SQL } from '../../src/adapters/eventstore/postgres/event-rows.js';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { jobStreamOf } from '../../src/adapters/postgres/queries/job-stream.js';
import { limitLine } from '../../src/adapters/postgres/queries/limit-line.js';
import { createLedger } from '../../src/adapters/ledger.js';
import { AUDIT_PAGE } from '../../src/commands/audit-page.js';
import { explainJob } from '../../src/commands/explain.js';
import { keyStateAt } from '../../src/commands/key-state-at.js';
import type { EventStore } from '../../src/domain/ports/event-store.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { budgetOf, ReadBudgetError } from '../../src/commands/read-budget.js';
import { keyStream } from '../../src/domain/streams.js';
import { ValidationError } from '../../src/domain/values.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';
import { until } from '../support/until.js';

// Issue 23: reads that cost what they show. Each stream is folded once, in place, a page at a
// time: folding with a copy of the state per event took ~1.8 ms an event on a key with 3,000
// unfinished jobs (a minute and a half for this key), so the first test cannot pass in its time
// with the quadratic fold; its assertions are on what it answers.

const PARKED = 3_000;
const REJECTED = 23_500; // two events each: with the parked jobs' and the holder's, over 50,000 events

let s: ScriptedLedger;

beforeAll(async () => {
  s = await openScriptedLedger();
  s.at(T0);
  const ids = Array.from({ length: PARKED + 1 }, (_, i) => `p${i}`);
  for (let i = 0; i < ids.length; i += 1_000) {
    await s.ledger.enqueueMany(ids.slice(i, i + 1_000).map((jobId) => ({ name: 'sync', key: 'big', limit: 1, jobId })));
  }
  // Arrivals refused at once: each leaves two events and nothing in the key's state.
  for (let i = 0; i < REJECTED; i += 1_000) {
    const n = Math.min(1_000, REJECTED - i);
    await s.ledger.enqueueMany(Array.from({ length: n }, () => ({ name: 'sync', key: 'big', whenFull: 'reject' as const })));
  }
}, 120_000);

afterAll(async () => {
  await s?.close();
});

describe('reads on a key with 3,000 parked jobs and 50,000 events', () => {
  it('regression (issue 23): explain on a key with 3,000 parked jobs and 50,000 events answers its place in line', async () => {
    expect(await s.eventCount()).toBeGreaterThanOrEqual(50_000);
    const x = await s.ledger.explain({ jobId: `p${PARKED}` });
    expect(x.status).toBe('parked');
    expect(x.limits[0]!.place).toEqual({ n: PARKED, of: PARKED });
  }, 30_000);

  it("a job's history and its audit, and the key's state as of a moment, fold the key once", async () => {
    const history = await s.ledger.jobHistory({ jobId: 'p1' });
    expect(history.events.map((e) => e.type)).toEqual(['JobEnqueued', 'JobParked']);
    const audit = await s.ledger.audit({ jobId: 'p0' });
    expect(audit.handoffs.map((h) => h.jobId)).toEqual(['p0']);
    const at = await s.ledger.keyStateAt('big', { at: T0 });
    expect('state' in at && Object.keys(at.state.jobs)).toHaveLength(PARKED + 1);
  }, 30_000);

  it("a job's rows on a key are found by the index on job ids, not by reading the key (appends_job_ids)", async () => {
    // As autovacuum would: the pending list of the GIN index merged, and the statistics fresh.
    await s.db.pool.query('VACUUM ANALYZE appends');
    const plan = (await s.db.pool.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${READ_JOB_EVENTS_SQL.replaceAll('$1::text[]', "'{p1}'::text[]").replaceAll('$2::text[]', "'{key:big}'::text[]").replaceAll('$3::text[]', "'{}'::text[]")}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    // The week that holds the rows is read by its index (an empty week may be scanned: it has no rows).
    expect(plan).toMatch(/Bitmap Index Scan on appends_w\d+_jl_job_ids_idx/);
  });

  it("a key's audit is a page, newest first, with the cursor to the one before", async () => {
    const first = await s.ledger.audit({ key: 'big' });
    expect(first.events).toHaveLength(AUDIT_PAGE);
    const { head, from, to, older } = first.page!;
    expect(to).toBe(head);
    expect(from).toBe(head + 1 - AUDIT_PAGE);
    expect(older).toBe(from);
    const next = await s.ledger.audit({ key: 'big', before: older!, limit: 10 });
    expect(next.events.map((e) => e.revision)).toEqual(Array.from({ length: 10 }, (_, i) => older! - 10 + i));
    // The first page of the stream has the holder's admission.
    const oldest = await s.ledger.audit({ key: 'big', before: 5, limit: 5 });
    expect(oldest.page).toEqual({ from: 0, to: 4, head, older: null });
    expect(oldest.handoffs.map((h) => h.jobId)).toEqual(['p0']);
  });

  it('regression (issue 23): a heavy read does not delay the sweeper: it ticks between the pages of one read of the whole key', async () => {
    // A second process's ledger on the same database, sweeping every 20 ms, as serve does beside its reads.
    const serving = await createLedger({ pool: s.db.pool, migrate: false, sweepIntervalMs: 20, logger: silentLogger });
    let ticks = 0;
    serving.onSweeperTickLag(() => ticks++);
    serving.start();
    try {
      await until(async () => ticks, (n) => n > 0, 'the sweeper\'s first ticks');
      // The budget's clock is asked once a page: what it sees is how many ticks came between them.
      const seen: number[] = [];
      const budget = {
        deadline: Infinity,
        ms: Infinity,
        clock: () => {
          seen.push(ticks);
          return 0;
        },
      };
      // The fold of the whole key, as for a key whose events predate kept states (migration 20): without them.
      const at = await keyStateAt(serving.store, keyStream('big'), { at: T0 + SEC }, budget);
      expect('state' in at).toBe(true);
      expect(seen.length).toBeGreaterThan(50); // a page of 1,000 events at a time
      expect(seen.at(-1)!).toBeGreaterThan(seen[0]!);
    } finally {
      await serving.close();
    }
  }, 60_000);

  it('a read past its budget stops with ReadBudgetError, and changes nothing', async () => {
    const before = await s.eventCount();
    let t = 0;
    // A clock that moves a second a page: the third page is past a budget of two seconds.
    const budget = budgetOf(() => (t += SEC), 2 * SEC);
    await expect(s.ledger.audit({ key: 'big', limit: 10_000 }, { budget })).rejects.toBeInstanceOf(ReadBudgetError);
    expect(await s.eventCount()).toBe(before);
  });

  it('bad page parameters name the field', async () => {
    await expect(s.ledger.audit({ key: 'big', limit: 0 })).rejects.toMatchObject({ field: 'limit' });
    await expect(s.ledger.audit({ key: 'big', before: -1 })).rejects.toBeInstanceOf(ValidationError);
    await expect(s.ledger.audit({ key: 'big', limit: 1.5 })).rejects.toMatchObject({ field: 'limit' });
  });
});

describe('audit pages', () => {
  let p: ScriptedLedger;
  beforeAll(async () => {
    p = await openScriptedLedger();
    p.at(T0);
    await p.ledger.enqueueMany(['a', 'b', 'c', 'd'].map((jobId) => ({ name: 'sync', key: 'k', limit: 1, jobId })));
    for (const [i, jobId] of ['a', 'b', 'c'].entries()) {
      p.at(T0 + (i + 1) * SEC);
      await p.start('k', jobId);
      await p.complete('k', jobId);
    }
  });
  afterAll(async () => {
    await p?.close();
  });

  it('walking the pages back gives every event once, and each handoff whole on the page of its admission', async () => {
    const whole = await p.ledger.audit({ key: 'k', limit: 10_000 });
    const events: number[] = [];
    const handoffs: string[] = [];
    let before: number | undefined;
    do {
      const page = await p.ledger.audit({ key: 'k', limit: 3, ...(before === undefined ? {} : { before }) });
      events.unshift(...page.events.map((e) => e.revision));
      handoffs.unshift(...page.handoffs.map((h) => `${h.leaseId} ${h.acquiredRevision}-${h.releasedRevision}`));
      before = page.page!.older ?? undefined;
    } while (before !== undefined);
    expect(events).toEqual(whole.events.map((e) => e.revision));
    expect(handoffs).toEqual(whole.handoffs.map((h) => `${h.leaseId} ${h.acquiredRevision}-${h.releasedRevision}`));
  });
});

describe('renewals in a job history', () => {
  let r: ScriptedLedger;
  beforeAll(async () => {
    r = await openScriptedLedger();
    r.at(T0);
    await r.ledger.enqueue({ name: 'long', key: 'r', jobId: 'j' });
    const leaseId = await r.start('r', 'j');
    for (let i = 1; i <= 360; i++) {
      r.at(T0 + i * 10 * SEC);
      await r.run('r', { type: 'Renew', jobId: 'j', leaseId });
    }
    await r.complete('r', 'j');
  }, 60_000);
  afterAll(async () => {
    await r?.close();
  });

  it('a run of renewals of one lease is one line that says how many; renewals: all gives each', async () => {
    const folded = await r.ledger.jobHistory({ jobId: 'j' });
    expect(folded.renewals).toBe('folded');
    expect(folded.events.map((e) => e.type)).toEqual(['JobEnqueued', 'SlotAcquired', 'JobStarted', 'LeaseRenewed', 'JobCompleted', 'SlotReleased']);
    const run = folded.events[3]!;
    expect(run.renewals).toEqual({ count: 360, firstAt: T0 + 10 * SEC, firstRevision: 4 });
    expect(run.at).toBe(T0 + 3_600 * SEC);
    expect(run.inWords).toMatch(/renewed 360 times, from .* to 2026-11-30T04:00:00.000Z/);
    const all = await r.ledger.jobHistory({ jobId: 'j', renewals: 'all' });
    expect(all.events.filter((e) => e.type === 'LeaseRenewed')).toHaveLength(360);
    expect(all.events.every((e) => e.renewals === undefined)).toBe(true);
  });

  it('readJobEvents leaves out the types asked for, and the rows that hold nothing else', async () => {
    const store = new PostgresEventStore(r.db.pool);
    const all = await store.readJobEvents(['j'], [keyStream('r')]);
    const without = await store.readJobEvents(['j'], [keyStream('r')], { except: ['LeaseRenewed'] });
    expect(all.filter((x) => x.type === 'LeaseRenewed')).toHaveLength(360);
    expect(without.map((x) => x.revision)).toEqual(all.filter((x) => x.type !== 'LeaseRenewed').map((x) => x.revision));
  });

  it('an unknown renewals value names the field', async () => {
    await expect(r.ledger.jobHistory({ jobId: 'j', renewals: 'some' as never })).rejects.toMatchObject({ field: 'renewals' });
  });

  it("the stream's events are unchanged by the folding", async () => {
    const events = await r.ledger.audit({ key: 'r', limit: 10_000 });
    expect(events.events.filter((e) => e.type === 'LeaseRenewed')).toHaveLength(360);
    expect(keyStream('r')).toBe(events.events[0]!.stream);
  });
});

describe('an explanation of now, without folding', () => {
  let e: ScriptedLedger;
  beforeAll(async () => {
    e = await openScriptedLedger();
    const { ledger } = e;
    e.at(T0);
    await ledger.enqueue({ name: 'sync', key: 'acme', limit: 1, maxAttempts: 3, jobId: 'a', limits: [{ key: 'api', limit: 2 }] });
    await ledger.enqueueMany(['b', 'c', 'd'].map((jobId) => ({ name: 'sync', key: 'acme', jobId, limits: [{ key: 'api' }] })));
    await ledger.enqueue({ name: 'other', key: 'zeta', limit: 1, jobId: 'z', limits: [{ key: 'api' }] });
    e.at(T0 + SEC);
    await e.start('acme', 'a', 'w1');
    const zLease = await e.start('zeta', 'z', 'w2');
    // Renewals, which an explanation of now does not read (the lease is in the state): its answer must not change.
    for (let i = 0; i < 3; i++) await e.run('zeta', { type: 'Renew', jobId: 'z', leaseId: zLease });
    e.at(T0 + 2 * SEC);
    await e.fail('acme', 'a', 'timeout'); // b is promoted; a waits for its retry
    await ledger.pause({ key: 'zeta', by: 'ops', reason: 'deploy' });
    await ledger.enqueue({ name: 'other', key: 'zeta', jobId: 'y' }); // parks: zeta is full and paused
    e.at(T0 + 3 * SEC);
    await e.start('acme', 'b', 'w1');
    await ledger.release({ key: 'acme', jobId: 'b', by: 'alice' });
    // A limit key's own job in its line among the guests, and the key paused.
    await ledger.enqueue({ name: 'own', key: 'api', jobId: 'o' });
    await ledger.pause({ key: 'api', by: 'ops', reason: 'quota' });
  });
  afterAll(async () => {
    await e?.close();
  });

  it('says what the fold of every stream says, for holders, parked, scheduled and finished jobs', async () => {
    const store = new PostgresEventStore(e.db.pool);
    // The same store without its index on job ids: every stream folded whole, as before issue 23.
    const folding: EventStore = {
      append: (...a) => store.append(...a),
      appendMany: (...a) => store.appendMany(...a),
      readStream: (...a) => store.readStream(...a),
      readStreams: (...a) => store.readStreams(...a),
      readAll: (...a) => store.readAll(...a),
      subscribe: (...a) => store.subscribe(...a),
      recordedEventIds: (...a) => store.recordedEventIds(...a),
      close: () => store.close(),
    };
    const base = { jobStream: (jobId: string) => jobStreamOf(e.db.pool, jobId), clock: () => T0 + 4 * SEC };
    const load = (stream: string) => e.ledger.keyState(stream.replace(/^key:/, ''));
    // Each limit key's line from the read models (what the ledger does with inline projections), counted.
    let lines = 0;
    const line = async (stream: string, jobId: string) => {
      const read = await limitLine(e.db.pool, stream, jobId);
      if (read !== undefined) lines++;
      return read;
    };
    const filled = new Set<number>();
    for (const jobId of ['a', 'b', 'c', 'd', 'z', 'y', 'o']) {
      const bounded = await explainJob({ ...base, store, load }, { jobId });
      const folded = await explainJob({ ...base, store: folding }, { jobId });
      // A guest holder's start is recorded at its home, which the fold of a limit key does not
      // read (it said null); found by its id, it is known. Everything else is the same.
      expect(withStartsOf(folded, bounded, filled), jobId).toEqual(folded);
      expect(await explainJob({ ...base, store, load, line }, { jobId }), jobId).toEqual(bounded);
    }
    expect([...filled].sort()).toEqual([T0 + SEC, T0 + 3 * SEC]); // z's start and b's, as guests of api
    expect(lines).toBe(5); // api, for each job under it: a, b, c, d, z
    const o = await e.ledger.explain({ jobId: 'o' });
    expect(o.limits[0]).toMatchObject({ key: 'api', paused: { by: 'ops', reason: 'quota' }, place: { n: 3, of: 3 }, ahead: ['c', 'd'] });
  });

  it("a limit key's line is not read from a read model held back by a quarantine: the key is loaded", async () => {
    expect(await limitLine(e.db.pool, keyStream('api'), 'd')).toBeDefined();
    await e.db.pool.query(
      `INSERT INTO jl_quarantined (stream, reader, revision, commit_id, position, error) VALUES ($1, 'projection:read_models', 1, '1', 1, 'test')`,
      [keyStream('api')],
    );
    try {
      expect(await limitLine(e.db.pool, keyStream('api'), 'd')).toBeUndefined();
    } finally {
      await e.db.pool.query(`DELETE FROM jl_quarantined WHERE stream = $1 AND error = 'test'`, [keyStream('api')]);
    }
  });
});

/** `bounded` with each startedAt the fold left null set back to null (the values it had go to `filled`). */
const withStartsOf = (folded: unknown, bounded: unknown, filled: Set<number>): unknown => {
  if (Array.isArray(bounded)) return bounded.map((b, i) => withStartsOf((folded as unknown[])?.[i], b, filled));
  if (typeof bounded !== 'object' || bounded === null) return bounded;
  return Object.fromEntries(
    Object.entries(bounded).map(([k, v]) => {
      const f = (folded as Record<string, unknown>)?.[k];
      if (k === 'startedAt' && f === null && typeof v === 'number') {
        filled.add(v);
        return [k, null];
      }
      return [k, withStartsOf(f, v, filled)];
    }),
  );
};

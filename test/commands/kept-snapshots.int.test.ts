import fc from 'fast-check';
import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { PostgresSnapshotStore } from '../../src/adapters/postgres/postgres-snapshot-store.js';
import { keyStateAt } from '../../src/commands/key-state-at.js';
import type { EventStore } from '../../src/domain/ports/event-store.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { ValidationError } from '../../src/domain/values.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { T0, SEC } from '../support/ledger.js';

// Issue 23: a key's state at a past moment folds from a kept state (snapshots_kept, migration 20)
// instead of the stream's first event. It must be the state the whole fold gives, for every
// moment and revision, also when two writers' clocks disagree (an event decided "later" than one
// after it): folding stops at the first event decided after the moment, and a kept state is used
// only when every event it holds was decided by then (decided_until).

const KEPT_EVERY = 20;
const KEY = 'kept/past';
const STREAM = keyStream(KEY);

let db: MigratedDatabase;
/** Two writers (two processes), each with its own clock: b's may run behind a's. */
let a: Ledger;
let b: Ledger;
const clocks = { a: T0, b: T0 };

/** The store, counting the events its reads return. */
const counting = (store: EventStore) => {
  const counter = { events: 0 };
  const proxy = new Proxy(store, {
    get: (target, prop, receiver) => {
      if (prop !== 'readStream') return Reflect.get(target, prop, receiver);
      return async (...args: Parameters<EventStore['readStream']>) => {
        const events = await target.readStream(...args);
        counter.events += events.length;
        return events;
      };
    },
  });
  return { store: proxy, counter };
};

beforeAll(async () => {
  db = await createMigratedDatabase(6, { pipeline: true });
  const open = (who: 'a' | 'b') => createLedger({ pool: db.pool, migrate: false, clock: () => clocks[who], random: () => 0.5, logger: silentLogger, snapshotEvery: 10, snapshotsKeptEvery: KEPT_EVERY });
  a = await open('a');
  b = await open('b');
});

afterAll(async () => {
  await a?.close();
  await b?.close();
  await db?.drop();
});

type Step = { readonly by: 'a' | 'b'; readonly op: 'enqueue' | 'run' | 'burst'; readonly dt: number; readonly skew: number };

const stepArb: fc.Arbitrary<Step> = fc.record({
  by: fc.constantFrom('a' as const, 'b' as const),
  op: fc.constantFrom('enqueue' as const, 'enqueue' as const, 'run' as const, 'burst' as const),
  dt: fc.integer({ min: 0, max: 3 * SEC }),
  // How far b's clock runs behind a's at this step.
  skew: fc.integer({ min: 0, max: 5 * SEC }),
});

let n = 0;
const play = async (step: Step): Promise<void> => {
  clocks.a += step.dt;
  clocks.b = clocks.a - step.skew;
  const ledger = step.by === 'a' ? a : b;
  if (step.op === 'enqueue') await ledger.enqueue({ name: 'past', key: KEY, limit: 2, jobId: `p${n++}` });
  if (step.op === 'burst') await ledger.enqueueMany(Array.from({ length: 7 }, () => ({ name: 'past', key: KEY, limit: 2, jobId: `p${n++}` })));
  if (step.op === 'run') {
    const holder = Object.entries((await ledger.keyState(KEY)).state.jobs).find(([, j]) => j.lease !== null);
    if (holder === undefined) return;
    const [jobId, job] = holder;
    const started = await ledger.execute(STREAM, { type: 'Start', jobId, leaseId: job.lease!.leaseId, workerId: step.by });
    if (E.isLeft(started)) return;
    await ledger.execute(STREAM, { type: 'Complete', jobId, leaseId: job.lease!.leaseId });
  }
};

describe('a state at a past moment is the fold\'s, from a kept state or not', () => {
  it('for every moment an event was decided at (and just before it), and every revision, with two writers whose clocks disagree', async () => {
    const kept = new PostgresSnapshotStore(db.pool);
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 5, maxLength: 40 }), async (steps) => {
        for (const step of steps) await play(step);
        const events = await a.store.readStream(STREAM);
        const moments = [...new Set(events.flatMap((e) => [(e.data as { at: number }).at, (e.data as { at: number }).at - 1]))];
        for (const at of moments) {
          expect(await keyStateAt(a.store, STREAM, { at }, undefined, kept)).toEqual(await keyStateAt(a.store, STREAM, { at }));
        }
        for (let revision = 0; revision < events.length; revision += 7) {
          expect(await keyStateAt(a.store, STREAM, { revision }, undefined, kept)).toEqual(await keyStateAt(a.store, STREAM, { revision }));
        }
      }),
      { numRuns: 12, seed: 2323 },
    );
    // The kept states were there to be used: the histories passed many multiples of KEPT_EVERY.
    const { rows } = await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM snapshots_kept WHERE stream = $1', [STREAM]);
    expect(rows[0]!.n).toBeGreaterThan(3);
  }, 180_000);

  it('reads only the events after the newest kept state the moment is past', async () => {
    const { rows } = await db.pool.query<{ revision: string; decided_until: string }>(
      'SELECT k.revision::text AS revision, k.decided_until::text AS decided_until FROM snapshots_kept k WHERE k.stream = $1 ORDER BY k.revision DESC LIMIT 1',
      [STREAM],
    );
    const newest = rows[0]!;
    const last = (await a.store.readStream(STREAM)).length - 1;
    const { store, counter } = counting(a.store);
    const found = await keyStateAt(store, STREAM, { revision: last }, undefined, new PostgresSnapshotStore(db.pool));
    expect(found.revision).toBe(last);
    expect(counter.events).toBe(last - Number(newest.revision));
    // At the moment it was decided by: that kept state, and nothing decided later.
    counter.events = 0;
    const at = await keyStateAt(store, STREAM, { at: Number(newest.decided_until) }, undefined, new PostgresSnapshotStore(db.pool));
    expect(at).toEqual(await keyStateAt(a.store, STREAM, { at: Number(newest.decided_until) }));
    expect(counter.events).toBeLessThan(last - Number(newest.revision) + 1_000);
  });

  it('decided_until is the latest decision time of every event up to the kept revision, not its last event\'s', async () => {
    const { rows } = await db.pool.query<{ revision: string; decided_until: string; last_at: string }>('SELECT k.revision::text AS revision, k.decided_until::text AS decided_until, k.last_at::text AS last_at FROM snapshots_kept k WHERE k.stream = $1 ORDER BY k.revision', [STREAM]);
    const events = await a.store.readStream(STREAM);
    const atOf = (i: number) => (events[i]!.data as { at: number }).at;
    for (const row of rows) {
      const upTo = Number(row.revision);
      expect(Number(row.decided_until)).toBe(Math.max(...events.slice(0, upTo + 1).map((_, i) => atOf(i))));
      expect(Number(row.last_at)).toBe(atOf(upTo));
    }
  });

  it('a kept state whose last event was decided before an earlier one (a writer whose clock is behind) is not used for a moment between them', async () => {
    const key = 'kept/skew';
    const stream = keyStream(key);
    const revisionOf = async () => (await a.store.readStream(stream)).length - 1;
    clocks.a = T0 + 100 * SEC;
    for (let i = 0; (await revisionOf()) < KEPT_EVERY - 4; i++) await a.enqueue({ name: 'skew', key, limit: 1, jobId: `sa${i}`, whenFull: 'reject' });
    clocks.b = T0 + 50 * SEC;
    const keptRows = async () => (await db.pool.query<{ decided_until: string; last_at: string }>('SELECT decided_until::text, last_at::text FROM snapshots_kept WHERE stream = $1', [stream])).rows;
    for (let i = 0; (await keptRows()).length === 0; i++) await b.enqueue({ name: 'skew', key, jobId: `sb${i}`, whenFull: 'reject' });
    const [row] = await keptRows();
    expect([Number(row!.last_at), Number(row!.decided_until)]).toEqual([T0 + 50 * SEC, T0 + 100 * SEC]);
    // At b's moment the fold stops at a's first event (decided later): the kept state is past that.
    const kept = new PostgresSnapshotStore(db.pool);
    for (const at of [T0 + 50 * SEC, T0 + 99 * SEC, T0 + 100 * SEC]) {
      expect(await keyStateAt(a.store, stream, { at }, undefined, kept)).toEqual(await keyStateAt(a.store, stream, { at }));
    }
    expect((await keyStateAt(a.store, stream, { at: T0 + 50 * SEC }, undefined, kept)).revision).toBe('no_stream');
  });

  it('a state with more jobs than snapshotsKeptEvery is kept that many events apart', async () => {
    const key = 'kept/wide';
    // 60 jobs parked behind one holder: the state holds 61 jobs, so kept states are at least 61 revisions apart.
    await a.enqueueMany(Array.from({ length: 61 }, (_, i) => ({ name: 'wide', key, limit: 1, jobId: `w${i}` })));
    for (let i = 0; i < 20; i++) await a.enqueue({ name: 'wide', key, jobId: `wx${i}`, whenFull: 'reject' });
    const { rows } = await db.pool.query<{ revision: string }>('SELECT k.revision::text AS revision FROM snapshots_kept k WHERE k.stream = $1 ORDER BY k.revision', [keyStream(key)]);
    const revisions = rows.map((r) => Number(r.revision));
    expect(revisions.length).toBeGreaterThan(0);
    for (let i = 1; i < revisions.length; i++) expect(revisions[i]! - revisions[i - 1]!).toBeGreaterThanOrEqual(61);
  });

  it('snapshotsKeptEvery that is not a multiple of snapshotEvery is refused, naming it', async () => {
    const open = (options: { snapshotEvery?: number; snapshotsKeptEvery: number }) => createLedger({ pool: db.pool, migrate: false, logger: silentLogger, ...options });
    await expect(open({ snapshotEvery: 10, snapshotsKeptEvery: 25 })).rejects.toMatchObject({ field: 'snapshotsKeptEvery' });
    await expect(open({ snapshotsKeptEvery: -1 })).rejects.toBeInstanceOf(ValidationError);
    // Snapshots off: nothing to keep, whatever the default.
    await (await open({ snapshotEvery: 0, snapshotsKeptEvery: 10_000 })).close();
  });
});

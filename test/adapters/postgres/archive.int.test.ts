import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../../src/adapters/ledger.js';
import { archiveFinishedJobs } from '../../../src/adapters/postgres/archive.js';
import { LOCK_SQL, type LockRow } from '../../../src/adapters/eventstore/postgres/stream-sql.js';
import { KEY_STATE_SCHEMA_VERSION } from '../../../src/domain/key-state.js';
import { silentLogger } from '../../../src/domain/ports/logger.js';
import { jobStream, keyStream } from '../../../src/domain/streams.js';
import { createReadModelProjections } from '../../../src/projections/read-models.js';
import { verify } from '../../../src/projections/verify.js';
import { historyOf } from '../../support/history.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../../support/ledger.js';

// Retention (issue 12, part 8), row by row (--exact; whole weeks: ./archive-weeks.int.test.ts): archive moves the rows of jobs finished before a cut out of
// `appends` (a row, one append, only when every job it names finished), and nothing any reader
// of history answers changes: a key's state (folded again by a
// ledger that has never seen it, so its lock reads the archive), `state --at` before and after
// the cut, the audit of a key and of a job, `replay --verify`; and the keys go on working.

let s: ScriptedLedger;
const CUT = T0 + 100 * SEC;
const KEYS = ['ar:a', 'ar:b', 'ar:t'];
const MOMENTS = [T0 + 5 * SEC, T0 + 50 * SEC, T0 + 150 * SEC, T0 + 300 * SEC];

const count = async (table: string): Promise<number> => (await s.db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]!.n;
/** Every answer about history that must not change. */
const history = (ledger: Ledger) => historyOf(ledger, { keys: KEYS, moments: MOMENTS, jobIds: ['a1', 'a2', 'b1', 'b2', 'u1', 'd1'] });

beforeAll(async () => {
  s = await openScriptedLedger();
  const { ledger } = s;
  // Before the cut: a1, a2 (a2 waited for a1's slot), b1 (under the limit key ar:t), u1 (no key)
  // and d1 (died) finish; b2 (under ar:t) and a3 are still waiting or running after it.
  s.at(T0);
  await ledger.enqueueMany([
    { name: 'work', key: 'ar:a', limit: 1, jobId: 'a1' },
    { name: 'work', key: 'ar:a', jobId: 'a2' },
    { name: 'work', key: 'ar:b', limit: 2, limits: [{ key: 'ar:t', limit: 1 }], jobId: 'b1' },
    { name: 'work', key: 'ar:b', limits: [{ key: 'ar:t' }], jobId: 'b2' },
    { name: 'work', jobId: 'u1' },
    { name: 'work', key: 'ar:a', jobId: 'd1', maxAttempts: 1 },
  ]);
  s.at(T0 + 10 * SEC);
  await s.start('ar:a', 'a1');
  await s.complete('ar:a', 'a1');
  await s.start('ar:b', 'b1');
  await s.complete('ar:b', 'b1');
  const u1 = (await ledger.execute(jobStream('u1'), { type: 'Start', jobId: 'u1', leaseId: 'u1:1', workerId: 'w1' }));
  expect(E.isRight(u1)).toBe(true);
  expect(E.isRight(await ledger.execute(jobStream('u1'), { type: 'Complete', jobId: 'u1', leaseId: 'u1:1' }))).toBe(true);
  s.at(T0 + 20 * SEC);
  await s.start('ar:a', 'a2');
  await s.complete('ar:a', 'a2');
  await s.start('ar:a', 'd1');
  await s.fail('ar:a', 'd1', 'boom');
  // After the cut: a3 arrives and runs; b2 holds its slots, unfinished.
  s.at(T0 + 200 * SEC);
  await ledger.enqueue({ name: 'work', key: 'ar:a', jobId: 'a3' });
  await s.start('ar:a', 'a3');
  await s.complete('ar:a', 'a3');
  await s.start('ar:b', 'b2');
  await ledger.drain();
});

afterAll(async () => {
  await s.close();
});

/** The jobs finished before the cut, and each one's home stream. */
const FINISHED = { a1: 'key:ar:a', a2: 'key:ar:a', b1: 'key:ar:b', u1: 'job:u1', d1: 'key:ar:a' };
/** The live rows a cut before which exactly `finished` finished must move: those every event of which names one of them (a key's own event names none); a job counts on its home stream. */
const movable = async (finished: Record<string, string> = FINISHED) =>
  (
    await s.db.pool.query<{ events: number; streams: number; jobs: number }>(
      `WITH m AS (
         SELECT a.* FROM appends a WHERE NOT EXISTS (SELECT FROM jsonb_array_elements(a.data) AS d WHERE NOT coalesce(d ->> 'jobId' = ANY($1), false)))
       SELECT (SELECT coalesce(sum(cardinality(types)), 0) FROM m)::int AS events, (SELECT count(DISTINCT stream) FROM m)::int AS streams,
              (SELECT count(DISTINCT d ->> 'jobId') FROM m, jsonb_array_elements(m.data) AS d WHERE ($2::jsonb ->> (d ->> 'jobId')) = m.stream)::int AS jobs`,
      [Object.keys(finished), JSON.stringify(finished)],
    )
  ).rows[0]!;

describe('archive --before', () => {
  it('a dry run counts what would move and moves nothing', async () => {
    const live = await count('events');
    const wanted = await movable();
    const dry = await archiveFinishedJobs(s.db.pool, { before: CUT, exact: true, dryRun: true });
    expect(dry).toMatchObject({ jobs: 5, streams: wanted.streams, events: wanted.events });
    expect(dry.events).toBeGreaterThan(10);
    expect(dry.liveEvents).toBe(live - dry.events);
    expect(await count('events')).toBe(live);
    expect(await count('events_archive')).toBe(0);
  });

  it("moves every row all of whose events name jobs finished before the cut (on their homes and limit keys), and no reader's answer changes", async () => {
    const before = await history(s.ledger);
    const live = await count('events');
    const wanted = await movable();
    // ar:a, ar:b and u1's own stream; every row of the limit key ar:t names b2 too (or is the key's own): they move next time.
    expect(wanted.streams).toBe(3);

    const moved = await archiveFinishedJobs(s.db.pool, { before: CUT, exact: true, streamsPerBatch: 2 });
    expect(moved).toMatchObject({ jobs: 5, events: wanted.events, streams: wanted.streams, liveEvents: live - wanted.events });
    expect(moved.bytes).toBeGreaterThan(0);
    expect(await count('events_archive')).toBe(wanted.events);
    // What stays live: the unfinished jobs' events and the keys' own (their limits), and the rows
    // that finished jobs share with those; every other event of a finished job moved.
    const { rows: left } = await s.db.pool.query<{ job: string | null }>(`SELECT DISTINCT data ->> 'jobId' AS job FROM events WHERE stream LIKE 'key:ar:%' ORDER BY 1`);
    expect(left.map((r) => r.job).filter((job) => !(job! in FINISHED))).toEqual(['a3', 'b2', null]);
    expect(await count(`events_archive WHERE data ->> 'jobId' IN ('a3', 'b2') OR NOT data ? 'jobId'`)).toBe(0);
    expect((await movable()).events).toBe(0);
    expect(await count(`events WHERE stream = 'job:u1'`)).toBe(0);

    // A ledger that never saw these keys folds them again (its lock reads the archive): the same states.
    const fresh = await createLedger({ pool: s.db.pool, migrate: false, logger: silentLogger });
    try {
      expect(await history(fresh)).toEqual(before);
      expect(await history(s.ledger)).toEqual(before);
    } finally {
      await fresh.close();
    }
    const verified = await verify(s.db.pool, createReadModelProjections());
    expect(verified.differences).toEqual([]);
    expect(verified.events).toBe(live);
  });

  it("the key writer's lock reads the archive only for a state built from before the newest archived revision", async () => {
    const stream = keyStream('ar:a');
    const client = await s.db.pool.connect();
    try {
      await client.query('BEGIN');
      const { rows: head } = await client.query<{ revision: string; archived_revision: string }>('SELECT revision, archived_revision FROM streams WHERE stream = $1', [stream]);
      const revision = Number(head[0]!.revision);
      expect(Number(head[0]!.archived_revision)).toBeGreaterThan(0);
      const lock = async (on: string, after: number | null) => {
        const { rows } = await client.query<LockRow & { revision: string | null; types: string[] | null }>(LOCK_SQL, [[on], [after], KEY_STATE_SCHEMA_VERSION]);
        return { head: rows.map((r) => Number(r.head)), rows: rows.map((r) => r.position), revisions: rows.flatMap((r) => (r.types ?? []).map((_, i) => Number(r.revision) + i)) };
      };
      // From nothing: every revision, live and archived, in order.
      expect((await lock(stream, -1)).revisions).toEqual(Array.from({ length: revision + 1 }, (_, i) => i));
      // A job stream all of whose rows moved: its revision and its events from the archive.
      const u1 = await lock(jobStream('u1'), -1);
      expect(u1.revisions).toEqual(Array.from({ length: u1.head[0]! + 1 }, (_, i) => i));
      expect(u1.head[0]).toBeGreaterThan(2);
      // Lock only (an optimistic flush) and a state at the head: no event, and the archive is never scanned.
      for (const after of [null, revision]) {
        expect((await lock(stream, after)).rows).toEqual([null]);
        const { rows: plan } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) ${LOCK_SQL.replaceAll('$1::text[]', `ARRAY['${stream}']`).replace('$2::bigint[]', `ARRAY[${after ?? 'NULL'}]::bigint[]`).replace('$3', String(KEY_STATE_SCHEMA_VERSION))}`);
        const archiveScan = plan.map((r) => r['QUERY PLAN']).filter((line) => line.includes('appends_archive'));
        expect(archiveScan.length).toBeGreaterThan(0);
        for (const line of archiveScan) expect(line).toMatch(/never executed/);
      }
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });

  it('the keys go on: a ledger that folds them from the archive decides on them, and an archived job id is still a duplicate', async () => {
    const fresh = await createLedger({ pool: s.db.pool, migrate: false, clock: () => T0 + 400 * SEC, logger: silentLogger });
    try {
      const lease = (await fresh.keyState('ar:b')).state.jobs.b2!.lease!.leaseId;
      expect(E.isRight(await fresh.execute(keyStream('ar:b'), { type: 'Complete', jobId: 'b2', leaseId: lease }))).toBe(true);
      const [again, next] = await fresh.enqueueMany([
        { name: 'work', key: 'ar:a', jobId: 'a1' },
        { name: 'work', key: 'ar:a', jobId: 'a4' },
      ]);
      expect(again!.status).toBe('duplicate');
      expect(next!.status).toBe('acquired');
      expect((await fresh.keyState('ar:t')).state.holding).toBe(0);
    } finally {
      await fresh.close();
    }
  });

  it('a second run moves only what finished since', async () => {
    const again = await archiveFinishedJobs(s.db.pool, { before: CUT, exact: true });
    expect(again).toMatchObject({ jobs: 0, events: 0, streams: 0 });
    // a3 and b2 (completed above); a4 still holds its slot. With them go the rows they shared with
    // jobs finished before (b1's completion promoted b2 in its row), and the limit key's rows.
    const wanted = await movable({ ...FINISHED, a3: 'key:ar:a', b2: 'key:ar:b' });
    const later = await archiveFinishedJobs(s.db.pool, { before: T0 + 500 * SEC, exact: true });
    expect(later).toMatchObject({ ...wanted, streams: 3 });
    expect(wanted.jobs).toBe(3);
    expect(await count(`events_archive WHERE stream = 'key:ar:t'`)).toBeGreaterThan(0);
  });
});

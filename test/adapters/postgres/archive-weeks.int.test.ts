import { setTimeout as sleep } from 'node:timers/promises';
import * as E from 'fp-ts/lib/Either.js';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../../src/adapters/ledger.js';
import { archiveFinishedJobs, type ArchiveResult } from '../../../src/adapters/postgres/archive.js';
import { silentLogger } from '../../../src/domain/ports/logger.js';
import { jobStream, keyStream } from '../../../src/domain/streams.js';
import { createReadModelProjections } from '../../../src/projections/read-models.js';
import { verify } from '../../../src/projections/verify.js';
import { historyOf } from '../../support/history.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../../support/ledger.js';

// Retention by partition (issue 22, lever 4; migration 17): a week of the ledger that ended
// before the cut leaves the live table whole: its partition is detached from appends and
// attached to appends_archive, not a row of it rewritten; the rows of jobs not finished (and a
// key's own) move on to the current week first. No reader of history answers differently.
//
// The rows are written now; a week three weeks back is made here and the first part of the
// workload is put in it, as if written then (its jobs' times are the ledger's clock, T0).

let s: ScriptedLedger;
const KEYS = ['aw:a', 'aw:b', 'aw:t'];
const MOMENTS = [T0 + 5 * SEC, T0 + 50 * SEC, T0 + 150 * SEC, T0 + 300 * SEC];
const DAY = 86_400_000;
/** The Monday (UTC) n weeks before this one's, as YYYY-MM-DD. */
const monday = (weeksAgo: number): string => {
  const now = new Date();
  const start = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()) - ((now.getUTCDay() + 6) % 7) * DAY;
  return new Date(start - weeksAgo * 7 * DAY).toISOString().slice(0, 10);
};
const OLD = monday(3);
const OLD_PARTITION = `appends_w${OLD.replaceAll('-', '')}`;

const q = async <T extends object>(sql: string, values: unknown[] = []): Promise<T[]> => (await s.db.pool.query<T & pg.QueryResultRow>(sql, values)).rows;
const count = async (from: string): Promise<number> => (await q<{ n: number }>(`SELECT count(*)::int AS n FROM ${from}`))[0]!.n;
const parentOf = async (table: string): Promise<string | undefined> =>
  (await q<{ parent: string }>(`SELECT i.inhparent::regclass::text AS parent FROM pg_inherits i WHERE i.inhrelid = $1::regclass`, [table]))[0]?.parent;
/** Every answer about history that must not change. */
const history = (ledger: Ledger) => historyOf(ledger, { keys: KEYS, moments: MOMENTS, jobIds: ['a1', 'a2', 'b1', 'b2', 'u1', 'u2', 'd1'] });

beforeAll(async () => {
  s = await openScriptedLedger();
  const { ledger } = s;
  s.at(T0);
  await ledger.enqueueMany([
    { name: 'work', key: 'aw:a', limit: 1, jobId: 'a1' },
    { name: 'work', key: 'aw:a', jobId: 'a2' },
    { name: 'work', key: 'aw:b', limit: 2, limits: [{ key: 'aw:t', limit: 1 }], jobId: 'b1' },
    { name: 'work', key: 'aw:b', limits: [{ key: 'aw:t' }], jobId: 'b2' },
    { name: 'work', jobId: 'u1' },
    { name: 'work', jobId: 'u2' },
    { name: 'work', key: 'aw:a', jobId: 'd1', maxAttempts: 1 },
  ]);
  s.at(T0 + 10 * SEC);
  await s.start('aw:a', 'a1');
  await s.complete('aw:a', 'a1');
  await s.start('aw:b', 'b1');
  await s.complete('aw:b', 'b1');
  for (const jobId of ['u1', 'u2']) {
    expect(E.isRight(await ledger.execute(jobStream(jobId), { type: 'Start', jobId, leaseId: `${jobId}:1`, workerId: 'w1' }))).toBe(true);
    expect(E.isRight(await ledger.execute(jobStream(jobId), { type: 'Complete', jobId, leaseId: `${jobId}:1` }))).toBe(true);
  }
  s.at(T0 + 20 * SEC);
  await s.start('aw:a', 'a2');
  await s.complete('aw:a', 'a2');
  await s.start('aw:a', 'd1');
  await s.fail('aw:a', 'd1', 'boom');
  await ledger.drain();
  // All of that "three weeks ago".
  await q(`CREATE TABLE ${OLD_PARTITION} (LIKE appends INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)`);
  await q(`ALTER TABLE appends ATTACH PARTITION ${OLD_PARTITION} FOR VALUES FROM ('${OLD}') TO ('${monday(2)}')`);
  await q(`UPDATE appends SET week = $1`, [OLD]);
  // This week: a3 arrives and runs; b2 (enqueued then) starts and holds its slots, unfinished.
  s.at(T0 + 200 * SEC);
  await ledger.enqueue({ name: 'work', key: 'aw:a', jobId: 'a3' });
  await s.start('aw:a', 'a3');
  await s.complete('aw:a', 'a3');
  await s.start('aw:b', 'b2');
  await ledger.drain();
});

afterAll(async () => {
  await s.close();
});

/** The old week's rows with xmin and ctid: the same values after the archive mean the same row versions, not rewritten. */
const oldRows = () =>
  q<{ stream: string; revision: string; xmin: string; ctid: string; staying: boolean }>(
    `SELECT a.stream, a.revision::text, a.xmin::text, a.ctid::text,
            EXISTS (SELECT FROM jsonb_array_elements(a.data) d WHERE NOT coalesce(d ->> 'jobId' = ANY($1), false)) AS staying
     FROM ${OLD_PARTITION} a ORDER BY a.stream, a.revision`,
    [['a1', 'a2', 'b1', 'u1', 'u2', 'd1']],
  );

describe('archive --before, by week', () => {
  let before: Awaited<ReturnType<typeof history>>;
  let dry: ArchiveResult;
  let rows: Awaited<ReturnType<typeof oldRows>>;

  it('a dry run names the weeks and counts what would move and move on, and changes nothing', async () => {
    before = await history(s.ledger);
    rows = await oldRows();
    const live = await count('events');
    dry = await archiveFinishedJobs(s.db.pool, { before: Date.now(), dryRun: true });
    const doomed = rows.filter((r) => !r.staying);
    expect(doomed.length).toBeGreaterThan(5);
    expect(rows.filter((r) => r.staying).length).toBeGreaterThan(0);
    const doomedEvents = (await q<{ n: number }>(`SELECT coalesce(sum(cardinality(types)), 0)::int AS n FROM ${OLD_PARTITION} a WHERE (a.stream, a.revision::text) IN (SELECT * FROM unnest($1::text[], $2::text[]))`, [doomed.map((r) => r.stream), doomed.map((r) => r.revision)]))[0]!.n;
    expect(dry).toMatchObject({ weeks: [OLD_PARTITION], weeksBefore: monday(0), movedOn: rows.length - doomed.length, jobs: 6, events: doomedEvents, liveEvents: live - doomedEvents });
    // --exact adds this week's rows of finished jobs (a3's), counted once.
    const exact = await archiveFinishedJobs(s.db.pool, { before: Date.now(), exact: true, dryRun: true });
    expect(exact).toMatchObject({ weeks: [OLD_PARTITION], movedOn: dry.movedOn, jobs: 7 });
    expect(exact.events).toBeGreaterThan(dry.events);
    expect(exact.events).toBeLessThan(live);
    expect(await count('events')).toBe(live);
    expect(await count('events_archive')).toBe(0);
    expect(await parentOf(OLD_PARTITION)).toBe('appends');
    expect(await oldRows()).toEqual(rows);
  });

  it('moves the week whole (its rows untouched), moves on what must stay live, and no reader answers differently', async () => {
    const live = await count('events');
    const result = await archiveFinishedJobs(s.db.pool, { before: Date.now() });
    expect(result).toEqual({ ...dry, liveEvents: live - dry.events });
    expect(await parentOf(OLD_PARTITION)).toBe('appends_archive');
    // The archived rows are the very row versions written (same xmin, same place), and only them.
    expect(await oldRows()).toEqual(rows.filter((r) => !r.staying));
    // The moved-on rows are live in this week's partition, at their positions.
    const stayed = rows.filter((r) => r.staying);
    const now = await q<{ stream: string; revision: string; part: string }>(
      `SELECT stream, revision::text, tableoid::regclass::text AS part FROM appends WHERE (stream, revision::text) IN (SELECT * FROM unnest($1::text[], $2::text[])) ORDER BY 1, 2`,
      [stayed.map((r) => r.stream), stayed.map((r) => r.revision)],
    );
    expect(now.map((r) => [r.stream, r.revision])).toEqual(stayed.map((r) => [r.stream, r.revision]));
    expect(new Set(now.map((r) => r.part))).toEqual(new Set([`appends_w${monday(0).replaceAll('-', '')}`]));
    // What stays live is the unfinished jobs' and the keys' own, with the rows they share.
    const { rows: left } = await s.db.pool.query<{ job: string | null }>(`SELECT DISTINCT data ->> 'jobId' AS job FROM events WHERE stream LIKE 'key:aw:%' ORDER BY 1`);
    expect(left.map((r) => r.job).filter((job) => !['a1', 'a2', 'b1', 'd1'].includes(job!))).toEqual(['a3', 'b2', null]);
    expect(await count(`events WHERE stream IN ('job:u1', 'job:u2')`)).toBe(0);
    expect(await q(`SELECT week_partition, week_from::text, rows::int, moved_on::int FROM jl_archived_weeks`)).toEqual([
      { week_partition: OLD_PARTITION, week_from: OLD, rows: rows.length - stayed.length, moved_on: stayed.length },
    ]);
    expect(await count(`events_archive WHERE archived IS NULL`)).toBe(0);

    const fresh = await createLedger({ pool: s.db.pool, migrate: false, logger: silentLogger });
    try {
      expect(await history(fresh)).toEqual(before);
      expect(await history(s.ledger)).toEqual(before);
    } finally {
      await fresh.close();
    }
    const verified = await verify(s.db.pool, createReadModelProjections());
    expect(verified.differences).toEqual([]);
  });

  it('the keys go on: b2 completes, a job id of the archived week is still a duplicate, and a second run finds nothing', async () => {
    const fresh = await createLedger({ pool: s.db.pool, migrate: false, clock: () => T0 + 400 * SEC, logger: silentLogger });
    try {
      const lease = (await fresh.keyState('aw:b')).state.jobs.b2!.lease!.leaseId;
      expect(E.isRight(await fresh.execute(keyStream('aw:b'), { type: 'Complete', jobId: 'b2', leaseId: lease }))).toBe(true);
      const [again, next] = await fresh.enqueueMany([
        { name: 'work', key: 'aw:a', jobId: 'a1' },
        { name: 'work', key: 'aw:a', jobId: 'a4' },
      ]);
      expect(again!.status).toBe('duplicate');
      expect(next!.status).toBe('acquired');
      expect((await fresh.keyState('aw:t')).state.holding).toBe(0);
    } finally {
      await fresh.close();
    }
    expect(await archiveFinishedJobs(s.db.pool, { before: Date.now() })).toMatchObject({ weeks: [], events: 0, movedOn: 0 });
  });

  it('is atomic for readers and lets writers on: while weeks move, a reader counts the same ledger every time and enqueues on other keys go through', async () => {
    // A second old week, of other keys' finished jobs, archived while readers count and writers write.
    const week = monday(1);
    const part = `appends_w${week.replaceAll('-', '')}`;
    s.at(T0 + 600 * SEC);
    const ids = Array.from({ length: 40 }, (_, i) => `c${i}`);
    await s.ledger.enqueueMany(ids.map((jobId, i) => ({ name: 'work', key: `aw:c${i % 4}`, limit: 10, jobId })));
    for (const [i, jobId] of ids.entries()) {
      await s.start(`aw:c${i % 4}`, jobId);
      await s.complete(`aw:c${i % 4}`, jobId);
    }
    await s.ledger.drain();
    await q(`CREATE TABLE ${part} (LIKE appends INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)`);
    await q(`ALTER TABLE appends ATTACH PARTITION ${part} FOR VALUES FROM ('${week}') TO ('${monday(0)}')`);
    await q(`UPDATE appends SET week = $1 WHERE stream LIKE 'key:aw:c%'`, [week]);
    const total = await count('ledger_appends');
    let stop = false;
    const seen = new Set<number>();
    let reads = 0;
    const reader = (async () => {
      while (!stop) {
        seen.add(await count(`ledger_appends WHERE NOT stream LIKE 'key:aw:w%'`));
        reads++;
      }
    })();
    let written = 0;
    const writer = (async () => {
      while (!stop) {
        const [r] = await s.ledger.enqueueMany([{ name: 'work', key: `aw:w${written}`, jobId: `w${written}` }]);
        expect(r!.status).toBe('acquired');
        written++;
      }
    })();
    const result = await archiveFinishedJobs(s.db.pool, { before: Date.now() });
    stop = true;
    await Promise.all([reader, writer]);
    expect(result.weeks).toEqual([part]);
    expect(result.jobs).toBe(40);
    expect(await parentOf(part)).toBe('appends_archive');
    expect([...seen]).toEqual([total]);
    expect(reads).toBeGreaterThan(1);
    expect(written).toBeGreaterThan(0);
    expect(await count(`events WHERE stream LIKE 'key:aw:w%'`)).toBeGreaterThanOrEqual(written);
    const verified = await verify(s.db.pool, createReadModelProjections());
    expect(verified.differences).toEqual([]);
  });

  it("a write in a week that has no partition yet (nobody opened or swept the ledger for a week) makes the week and goes through", async () => {
    const current = `appends_w${monday(0).replaceAll('-', '')}`;
    const next = `appends_w${monday(-1).replaceAll('-', '')}`;
    // This week's partition gone (its rows kept aside, put back after), and the next one too.
    await q(`ALTER TABLE appends DETACH PARTITION ${current}`);
    await q(`ALTER TABLE ${current} RENAME TO aside`);
    await q(`DROP TABLE ${next}`);
    try {
      const [r] = await s.ledger.enqueueMany([{ name: 'work', key: 'aw:heal', jobId: 'heal' }]);
      expect(r!.status).toBe('acquired');
      expect(await parentOf(current)).toBe('appends');
      expect(await parentOf(next)).toBe('appends');
      expect(await count(`${current} WHERE stream = 'key:aw:heal'`)).toBe(1);
    } finally {
      const columns = 'position, transaction_id, stream, revision, types, ids, data, metadata, metadatas, created, week, archived';
      await q(`INSERT INTO ${current} (${columns}) SELECT ${columns} FROM aside`);
      await q(`DROP TABLE aside`);
    }
  });
});

describe('archive by week, regression', () => {
  it("issue 22: a job stream's rows across weeks stay in revision order when an unfinished job's rows move on: its history reads whole after its later week is archived", async () => {
    const t = await openScriptedLedger();
    try {
      const sql = async (text: string, values: unknown[] = []) => (await t.db.pool.query(text, values)).rows;
      const week = async (from: string, to: string) => {
        const part = `appends_w${from.replaceAll('-', '')}`;
        await sql(`CREATE TABLE ${part} (LIKE appends INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)`);
        await sql(`ALTER TABLE appends ATTACH PARTITION ${part} FOR VALUES FROM ('${from}') TO ('${to}')`);
      };
      // u3's enqueue five weeks ago, its start four weeks ago (a retry later), its end this week.
      await week(monday(5), monday(4));
      await week(monday(4), monday(3));
      t.at(T0);
      await t.ledger.enqueue({ name: 'work', jobId: 'u3' });
      await sql(`UPDATE appends SET week = $1 WHERE stream = 'job:u3'`, [monday(5)]);
      expect(E.isRight(await t.ledger.execute(jobStream('u3'), { type: 'Start', jobId: 'u3', leaseId: 'u3:1', workerId: 'w1' }))).toBe(true);
      await sql(`UPDATE appends SET week = $1 WHERE stream = 'job:u3' AND week = $2`, [monday(4), monday(0)]);
      // A cut inside the week four weeks back: only the week five weeks back ends by its Monday; u3 is unfinished.
      const first = await archiveFinishedJobs(t.db.pool, { before: Date.parse(`${monday(4)}T12:00:00Z`) });
      expect(first).toMatchObject({ weeks: [`appends_w${monday(5).replaceAll('-', '')}`], events: 0, movedOn: 1 });
      // Moved on to the first week that run left live (four weeks back), before u3's later row, not to this week.
      expect(await sql(`SELECT revision::int, week::text FROM appends WHERE stream = 'job:u3' ORDER BY revision`)).toEqual([
        { revision: 0, week: monday(4) },
        { revision: 2, week: monday(4) },
      ]);
      t.at(T0 + 10 * SEC);
      expect(E.isRight(await t.ledger.execute(jobStream('u3'), { type: 'Complete', jobId: 'u3', leaseId: 'u3:1' }))).toBe(true);
      await t.ledger.drain();
      const read = async () => (await t.ledger.store.readStream(jobStream('u3'))).map((e) => `${e.revision}:${e.type}`);
      const whole = await read();
      const audit = await t.ledger.audit({ jobId: 'u3' });
      const second = await archiveFinishedJobs(t.db.pool, { before: Date.now() });
      expect(second.weeks).toEqual([`appends_w${monday(4).replaceAll('-', '')}`]);
      expect(await sql(`SELECT revision::int FROM appends WHERE stream = 'job:u3'`)).toEqual([{ revision: 3 }]);
      expect(await read()).toEqual(whole);
      expect(whole.length).toBeGreaterThan(3);
      expect(await t.ledger.audit({ jobId: 'u3' })).toEqual(audit);
      const fresh = await createLedger({ pool: t.db.pool, migrate: false, clock: () => T0 + 20 * SEC, logger: silentLogger });
      try {
        const [again] = await fresh.enqueueMany([{ name: 'work', jobId: 'u3' }]);
        expect(again!.status).toBe('duplicate');
      } finally {
        await fresh.close();
      }
      const verified = await verify(t.db.pool, createReadModelProjections());
      expect(verified.differences).toEqual([]);
    } finally {
      await t.close();
    }
  });

  it('waits out a long transaction on the ledger instead of failing: its schema changes give up their lock wait after 2 s and try again', async () => {
    const t = await openScriptedLedger();
    const reader = await t.db.pool.connect();
    try {
      const from = monday(2);
      const part = `appends_w${from.replaceAll('-', '')}`;
      await t.db.pool.query(`CREATE TABLE ${part} (LIKE appends INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)`);
      await t.db.pool.query(`ALTER TABLE appends ATTACH PARTITION ${part} FOR VALUES FROM ('${from}') TO ('${monday(1)}')`);
      t.at(T0);
      await t.ledger.enqueue({ name: 'work', key: 'aw:long', jobId: 'long1' });
      await t.start('aw:long', 'long1');
      await t.complete('aw:long', 'long1');
      await t.db.pool.query(`UPDATE appends SET week = $1`, [from]);
      // A report reading the ledger holds its lock on every week for 3.5 s, longer than one wait.
      await reader.query('BEGIN');
      await reader.query('SELECT count(*) FROM appends');
      const archived = archiveFinishedJobs(t.db.pool, { before: Date.now() });
      await sleep(3_500);
      await reader.query('COMMIT');
      expect((await archived).weeks).toEqual([part]);
      expect((await t.db.pool.query(`SELECT i.inhparent::regclass::text AS p FROM pg_inherits i WHERE i.inhrelid = $1::regclass`, [part])).rows[0].p).toBe('appends_archive');
    } finally {
      reader.release();
      await t.close();
    }
  });
});

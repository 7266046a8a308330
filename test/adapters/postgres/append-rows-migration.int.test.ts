import { randomUUID } from 'node:crypto';
import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger } from '../../../src/adapters/ledger.js';
import { migrate } from '../../../src/adapters/postgres/migrations.js';
import { enqueuedEventId } from '../../../src/commands/enqueue.js';
import { fold, initialKeyState } from '../../../src/domain/key-state.js';
import { silentLogger } from '../../../src/domain/ports/logger.js';
import { jobStream } from '../../../src/domain/streams.js';
import { decodeRecorded } from '../../../src/domain/recorded.js';
import { READ_MODEL_TABLES, createReadModelProjections } from '../../../src/projections/read-models.js';
import { verify } from '../../../src/projections/verify.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/database.js';
import { manualClock, randomRun } from '../../projections/support.js';

// Issue 22: migration 16 regroups a ledger written one row per event (events, events_archive, a
// streams row for every stream) into rows per append. A ledger is made by today's code (database
// A), written out as that format stored it (database B, migrated up to 15: every event a row of
// its own, in its transaction and order, some jobs' events archived as `archive` moved them),
// and B migrated on. Nothing may be lost or reordered, the rows must be whole appends again, the
// positions named elsewhere must follow their events, and replay --verify must find B's read
// models (A's, copied) to be what B's ledger gives.

interface Event {
  xid: string;
  stream: string;
  stream_revision: string;
  type: string;
  data: Record<string, unknown>;
  metadata: Record<string, unknown>;
  event_id: string;
  created: string;
}

let a: MigratedDatabase;
let b: MigratedDatabase;
let events: Event[];
let rowsOfA: { xid: string; stream: string; revision: string; types: string[]; ids: string[] }[];
/** The events moved to events_archive in B, by their index in `events`. */
const archived = new Set<number>();
/** The event a checkpoint and a quarantine name in B, by its index. */
const CHECKPOINT_AT = 57;
const QUARANTINE_AT = 101;

const clock = manualClock();
const GENERIC = 'gen-stream';

const eventColumns = `transaction_id::text AS xid, stream, stream_revision::text, type, data, metadata, event_id, created::text`;

beforeAll(async () => {
  a = await createMigratedDatabase(6, { pipeline: true });
  const ledger = await createLedger({ pool: a.pool, migrate: false, clock: clock.now, logger: silentLogger });
  try {
    await randomRun(ledger, clock, { seed: 16, steps: 200, keys: ['mg:a', 'mg:b', 'mg:c'], prefix: 'mg', limitKeys: ['mg:t'] });
    // A job without a key that ran to its end (its stream is archived below).
    await ledger.enqueue({ name: 'solo', jobId: 'mg-u1' });
    for (const command of [{ type: 'Start', jobId: 'mg-u1', leaseId: 'mg-u1:1', workerId: 'w1' }, { type: 'Complete', jobId: 'mg-u1', leaseId: 'mg-u1:1' }] as const) {
      expect(E.isRight(await ledger.execute(jobStream('mg-u1'), command))).toBe(true);
    }
    await ledger.drain();
  } finally {
    await ledger.close();
  }
  // A stream of the event-store port, its events of different metadata in one append (events a
  // replay decodes, as it decodes every event of the ledger; no projection handles the stream).
  const limit = (n: number) => ({ type: 'KeyLimitSet', data: { limit: n, leaseMs: 1_000, by: null, at: 1 } });
  await new PostgresEventStore(a.pool).append(GENERIC, 'no_stream', [
    { ...limit(1), metadata: { by: 'x' }, eventId: randomUUID() },
    { ...limit(2), eventId: randomUUID() },
  ]);
  events = (await a.pool.query<Event>(`SELECT ${eventColumns} FROM events ORDER BY transaction_id, global_position`)).rows;
  rowsOfA = (await a.pool.query(`SELECT transaction_id::text AS xid, stream, revision::text, types, ids::text[] AS ids FROM appends ORDER BY transaction_id, position`)).rows;

  b = await createMigratedDatabase(4, { upTo: 15 });
  // As that format wrote it: one row per event, positions in the order of their transactions.
  await b.pool.query(
    `INSERT INTO events (global_position, transaction_id, stream, stream_revision, type, data, metadata, event_id, created) OVERRIDING SYSTEM VALUE
     SELECT n, xid::xid8, stream, stream_revision, type, data, metadata, event_id, created
     FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (xid text, stream text, stream_revision bigint, type text, data jsonb, metadata jsonb, event_id uuid, created timestamptz))
       WITH ORDINALITY AS e (xid, stream, stream_revision, type, data, metadata, event_id, created, n)`,
    [JSON.stringify(events)],
  );
  await b.pool.query(
    `INSERT INTO streams (stream, revision, transaction_id)
     SELECT DISTINCT ON (stream) stream, stream_revision, transaction_id FROM events ORDER BY stream, stream_revision DESC`,
  );
  // Archived as `archive` moved events then, one by one: every event of a job without a key, and
  // of a keyed job (on its key, beside other jobs' events of the same appends), that finished.
  const { rows: finished } = await a.pool.query<{ job_id: string; stream: string }>(
    `(SELECT job_id, stream FROM jl_jobs WHERE status = 'completed' AND stream LIKE 'job:%' ORDER BY job_id LIMIT 1)
     UNION ALL (SELECT job_id, stream FROM jl_jobs WHERE status = 'completed' AND stream LIKE 'key:%' ORDER BY job_id LIMIT 1)`,
  );
  expect(finished).toHaveLength(2);
  events.forEach((e, i) => {
    if (finished.some((f) => e.data.jobId === f.job_id)) archived.add(i);
  });
  await b.pool.query(
    `WITH moved AS (DELETE FROM events WHERE global_position = ANY($1::bigint[]) RETURNING *)
     INSERT INTO events_archive (global_position, transaction_id, stream, stream_revision, type, data, metadata, event_id, created) SELECT * FROM moved`,
    [[...archived].map((i) => i + 1)],
  );
  await b.pool.query(`UPDATE streams s SET archived_revision = a.r FROM (SELECT stream, max(stream_revision) AS r FROM events_archive GROUP BY stream) a WHERE s.stream = a.stream`);
  // A's read models, as the live ones B's replay is compared with.
  for (const table of READ_MODEL_TABLES) {
    // As record literals: the same types on both sides, JSON null and SQL NULL kept apart.
    const { rows } = await a.pool.query<{ r: string }>(`SELECT t::text AS r FROM ${table} t`);
    await b.pool.query(`INSERT INTO ${table} SELECT (r::${table}).* FROM unnest($1::text[]) AS r`, [rows.map((row) => row.r)]);
  }
  const at = (i: number) => ({ xid: events[i]!.xid, position: i + 1 });
  await b.pool.query(
    `INSERT INTO projection_checkpoints (projection, commit, prepare) VALUES ('mid-run', $1::numeric, $2), ('elsewhere', 3, 12345)`,
    [at(CHECKPOINT_AT).xid, at(CHECKPOINT_AT).position],
  );
  await b.pool.query(
    `INSERT INTO jl_quarantined (stream, reader, revision, position, commit_id, error) VALUES ($1, 'projection:test', $2, $3, $4::xid8, 'a test')`,
    [events[QUARANTINE_AT]!.stream, events[QUARANTINE_AT]!.stream_revision, at(QUARANTINE_AT).position, at(QUARANTINE_AT).xid],
  );
  await migrate(b.pool);
}, 180_000);

afterAll(async () => {
  await a?.drop();
  await b?.drop();
});

describe('issue 22: migration 16 (rows per append) on a populated ledger of the format before it', () => {
  it('keeps every event, in its transaction and order, with its id, data, metadata and creation time', async () => {
    expect(events.length).toBeGreaterThan(300);
    const after = (await b.pool.query<Event>(`SELECT ${eventColumns} FROM ledger_events ORDER BY transaction_id, global_position`)).rows;
    expect(after).toEqual(events);
    const live = (await b.pool.query<Event>(`SELECT ${eventColumns} FROM events ORDER BY transaction_id, global_position`)).rows;
    expect(live).toEqual(events.filter((_, i) => !archived.has(i)));
    expect((await b.pool.query<Event>(`SELECT ${eventColumns} FROM events_archive ORDER BY transaction_id, global_position`)).rows).toEqual(events.filter((_, i) => archived.has(i)));
    expect(archived.size).toBeGreaterThan(3);
    // Positions strictly increase in the global order.
    const { rows: positions } = await b.pool.query<{ p: string }>(`SELECT global_position::text AS p FROM ledger_events ORDER BY transaction_id, global_position`);
    const { rows: byPosition } = await b.pool.query<{ p: string }>(`SELECT global_position::text AS p FROM ledger_events ORDER BY global_position`);
    expect(positions).toEqual(byPosition);
    expect(new Set(positions.map((r) => r.p)).size).toBe(events.length);
  });

  it('groups the events of each append into one row: the rows of the untouched appends are the ones today\'s writer wrote, and the archive cuts the others', async () => {
    const { rows } = await b.pool.query<{ xid: string; stream: string; revision: string; types: string[]; ids: string[]; archived: boolean }>(
      `SELECT transaction_id::text AS xid, stream, revision::text, types, ids::text[] AS ids, false AS archived FROM appends
       UNION ALL SELECT transaction_id::text, stream, revision::text, types, ids::text[], true FROM appends_archive
       ORDER BY xid, revision`,
    );
    const key = (r: { xid: string; stream: string; revision: string }) => `${r.xid}/${r.stream}/${r.revision}`;
    const migrated = new Map(rows.map((r) => [key(r), r]));
    const archivedIds = new Set([...archived].map((i) => events[i]!.event_id));
    let cut = 0;
    for (const row of rowsOfA) {
      if (!row.ids.some((id) => archivedIds.has(id))) {
        expect(migrated.get(key(row)), key(row)).toMatchObject({ types: row.types, ids: row.ids, archived: false });
        continue;
      }
      // A's row, cut where its events went to the archive: consecutive runs of one table each.
      cut++;
      const parts = rows.filter((r) => r.xid === row.xid && r.stream === row.stream && row.ids.includes(r.ids[0]!));
      expect(parts.flatMap((p) => p.ids).sort()).toEqual([...row.ids].sort());
      for (const part of parts) expect(part.ids.every((id) => archivedIds.has(id) === part.archived), key(part)).toBe(true);
    }
    expect(cut).toBeGreaterThan(0);
    expect(rows.length).toBeGreaterThan(rowsOfA.length);
    expect(rowsOfA.length).toBeLessThan(events.length);
  });

  it('drops the streams rows of job streams and keeps the others, at their revisions; every enqueue id and every port id is unique', async () => {
    const { rows } = await b.pool.query<{ stream: string; revision: string; archived_revision: string | null }>(`SELECT stream, revision::text, archived_revision::text FROM streams ORDER BY stream`);
    const last = new Map<string, string>();
    for (const e of events) last.set(e.stream, e.stream_revision);
    expect(rows.map((r) => [r.stream, r.revision])).toEqual([...last].filter(([s]) => !s.startsWith('job:')).sort(([x], [y]) => (x < y ? -1 : 1)));
    expect(rows.some((r) => r.archived_revision !== null)).toBe(true);
    const { rows: unique } = await b.pool.query<{ id: string }>(`SELECT event_id::text AS id FROM unique_event_ids ORDER BY event_id`);
    const wanted = events.filter((e) => e.type === 'JobEnqueued' || e.stream === GENERIC).map((e) => e.event_id);
    expect(unique.map((r) => r.id)).toEqual(wanted.sort());
    expect(wanted).toContain(enqueuedEventId(String(events.find((e) => e.type === 'JobEnqueued')!.data.jobId)));
  });

  it('moves a checkpoint and a quarantine to their events\' new positions; a checkpoint of no transaction of the ledger stays', async () => {
    const position = async (i: number) =>
      (await b.pool.query<{ p: string }>(`SELECT global_position::text AS p FROM ledger_events WHERE event_id = $1`, [events[i]!.event_id])).rows[0]!.p;
    const { rows } = await b.pool.query<{ projection: string; commit: string; prepare: string }>(`SELECT projection, commit::text, prepare::text FROM projection_checkpoints ORDER BY projection`);
    expect(rows).toEqual([
      { projection: 'elsewhere', commit: '3', prepare: '12345' },
      { projection: 'mid-run', commit: events[CHECKPOINT_AT]!.xid, prepare: await position(CHECKPOINT_AT) },
    ]);
    const { rows: quarantined } = await b.pool.query<{ position: string }>(`SELECT position::text FROM jl_quarantined`);
    expect(quarantined).toEqual([{ position: await position(QUARANTINE_AT) }]);
  });

  it('every stream folds as before, replay --verify finds the read models what the ledger gives, and the ledger goes on', async () => {
    const store = new PostgresEventStore(b.pool);
    for (const stream of new Set(events.map((e) => e.stream).filter((s) => s.startsWith('key:') || s.startsWith('job:')))) {
      const before = events.filter((e) => e.stream === stream).map((e) => decodeRecorded({ stream, revision: Number(e.stream_revision), type: e.type, data: e.data, metadata: e.metadata }));
      expect(fold(initialKeyState, (await store.readStream(stream)).map(decodeRecorded)), stream).toEqual(fold(initialKeyState, before));
    }
    expect((await verify(b.pool, createReadModelProjections())).differences).toEqual([]);
    const ledger = await createLedger({ pool: b.pool, migrate: false, clock: clock.now, logger: silentLogger });
    try {
      const [again, next] = await ledger.enqueueMany([
        { name: 'work', key: 'mg:a', jobId: String(events.find((e) => e.type === 'JobEnqueued' && e.stream === 'key:mg:a')!.data.jobId) },
        { name: 'work', jobId: 'after-16' },
      ]);
      expect(again!.status).toBe('duplicate');
      expect(next!.status).toBe('acquired');
      await ledger.drain();
    } finally {
      await ledger.close();
    }
    expect((await verify(b.pool, createReadModelProjections())).differences).toEqual([]);
  });
});

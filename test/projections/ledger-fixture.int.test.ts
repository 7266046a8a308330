import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger } from '../../src/adapters/ledger.js';
import { migrate } from '../../src/adapters/postgres/migrations.js';
import { fold, initialKeyState } from '../../src/domain/key-state.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { decodeRecorded } from '../../src/domain/recorded.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { rebuild } from '../../src/projections/rebuild.js';
import { verify } from '../../src/projections/verify.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { readModelRows } from './support.js';

// A ledger of today's format, kept as it was written (test/fixtures/ledger-format-1.json: the
// events of a small scripted run — enqueue, park, promote, start, renew, complete, fail and
// retry, discard, set limit, yield, lease expiry and death, revoke, cancel, a job without a key —
// with the states and read models that release folded and projected from them). Loaded into a
// fresh database, every event must still decode and give the same states and read models: a
// change to an event's shape that would leave ledgers already written unreadable (rather than
// upcasting them, src/domain/upcasters.ts) fails here. Never regenerate it to make this pass; a
// new format gets a fixture of its own beside this one.

interface Fixture {
  readonly events: readonly { stream: string; revision: number; type: string; data: object; metadata: object; event_id: string; tx: number }[];
  readonly states: Readonly<Record<string, unknown>>;
  readonly readModels: Readonly<Record<string, unknown[]>>;
}

const fixture = JSON.parse(readFileSync(new URL('../fixtures/ledger-format-1.json', import.meta.url), 'utf8')) as Fixture;
const json = (v: unknown) => JSON.parse(JSON.stringify(v));

/**
 * A state as this format's release folded it: without `dead` (the key's dead jobs, kept since
 * issue 21), which must name exactly the jobs of the stream that died (JobDead) and were neither
 * retried nor discarded since.
 */
const asThatRelease = (stream: string, state: { readonly dead?: Record<string, number> }): unknown => {
  const { dead, ...rest } = json(state) as { dead?: Record<string, number> };
  const died = new Map<string, number>();
  for (const e of fixture.events.filter((x) => x.stream === stream)) {
    const { jobId, at } = e.data as { jobId?: string; at: number };
    if (e.type === 'JobDead') died.set(jobId!, at);
    if (e.type === 'JobRetried' || e.type === 'DeadDiscarded') died.delete(jobId!);
  }
  expect(dead ?? {}, `${stream}: its dead jobs`).toEqual(Object.fromEntries(died));
  return rest;
};

let db: MigratedDatabase;
/** The last migration before the ledger's rows became rows per append (migration 16). */
const LAST_PER_EVENT_SCHEMA = 15;

beforeAll(async () => {
  // Stored as that format stored it (one row of events per event, a streams row per stream, job
  // streams' too), then migrated on: migration 16 regroups it into rows per append.
  db = await createMigratedDatabase(4, { pipeline: true, upTo: LAST_PER_EVENT_SCHEMA });
  // One transaction per transaction of the run, in its order: the global order and the batches are the run's.
  for (const tx of [...new Set(fixture.events.map((e) => e.tx))]) {
    const events = fixture.events.filter((e) => e.tx === tx);
    await db.pool.query(
      `WITH e AS (SELECT * FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (stream text, revision bigint, type text, data jsonb, metadata jsonb, event_id uuid)) WITH ORDINALITY AS e (stream, revision, type, data, metadata, event_id, ord)),
       s AS (
         INSERT INTO streams (stream, revision) SELECT stream, max(revision) FROM e GROUP BY stream
         ON CONFLICT (stream) DO UPDATE SET revision = excluded.revision, transaction_id = pg_current_xact_id()
       )
       INSERT INTO events (stream, stream_revision, type, data, metadata, event_id) SELECT stream, revision, type, data, metadata, event_id FROM e ORDER BY ord`,
      [JSON.stringify(events)],
    );
  }
  await migrate(db.pool);
});

afterAll(async () => {
  await db?.drop();
});

describe("a ledger of today's format (fixture)", () => {
  it('covers every event type of its format (the 17 before KeyPaused and KeyResumed)', () => {
    expect(new Set(fixture.events.map((e) => e.type)).size).toBe(17);
  });

  it('every event decodes, and each stream folds to the state the release that wrote it folded', async () => {
    const store = new PostgresEventStore(db.pool);
    const streams = Object.keys(fixture.states);
    expect(streams.sort()).toEqual([...new Set(fixture.events.map((e) => e.stream))].sort());
    for (const stream of streams) {
      expect(asThatRelease(stream, fold(initialKeyState, (await store.readStream(stream)).map(decodeRecorded))), stream).toEqual(fixture.states[stream]);
    }
  });

  it('a replay rebuilds the read models it had, and verify finds nothing different', async () => {
    await rebuild(db.pool, createReadModelProjections());
    // Columns added since this format (jl_keys.paused_*, jl_jobs.limits and the live row's) must read as their default,
    // NULL, or as what the tables they replaced held; the guest counts of jl_key_stats as 0 (no job of it is under a further limit); the rest as they were.
    const rows = json(await readModelRows(db.pool)) as Record<string, Record<string, unknown>[]>;
    const asWritten = Object.fromEntries(
      Object.entries(fixture.readModels).map(([table, written]) => {
        const columns = Object.keys((written[0] ?? {}) as object);
        return [table, rows[table]!.map((row) => Object.fromEntries(columns.map((c) => [c, row[c]])))];
      }),
    );
    expect(asWritten).toEqual(fixture.readModels);
    const added = Object.entries(rows).flatMap(([table, live]) =>
      live.flatMap((row) => Object.entries(row).filter(([c, v]) => !(c in ((fixture.readModels[table]?.[0] ?? {}) as object)) && v !== null).map(([c, v]) => [`${table}.${c}`, v])),
    );
    // And the columns of the live row (migration 0015), which jl_slots and jl_parked are views of: what those tables held then.
    const slots = (fixture.readModels.jl_slots ?? []) as { how: string; acquired_at: string }[];
    expect(added).toEqual([
      ...slots.flatMap((slot) => [['jl_jobs.how', slot.how], ['jl_jobs.acquired_at', slot.acquired_at]]),
      ['jl_key_stats.guests_holding', 0],
      ['jl_key_stats.guests_parked', 0],
    ]);
    expect(rows.jl_limit_jobs).toEqual([]);
    expect(rows.jl_jobs!.map((j) => j.limits)).toEqual(fixture.readModels.jl_jobs!.map(() => null));
    expect((await verify(db.pool, createReadModelProjections())).differences).toEqual([]);
  });

  it('a ledger opened on it reads the keys and their states', async () => {
    const ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
    try {
      expect(asThatRelease('key:fx', (await ledger.keyState('fx')).state)).toEqual(fixture.states['key:fx']);
      expect((await ledger.audit({ key: 'fx' })).events).toHaveLength(fixture.events.filter((e) => e.stream === 'key:fx').length);
    } finally {
      await ledger.close();
    }
  });
});

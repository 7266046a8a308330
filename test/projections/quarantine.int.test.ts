import { afterEach, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { readLedgerMetrics } from '../../src/adapters/postgres/queries/ledger-metrics.js';
import { START, comparePositions, type GlobalPosition } from '../../src/domain/ports/event-store.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { DISPATCHER, createDispatcher } from '../../src/projections/dispatcher.js';
import type { Projection } from '../../src/projections/projection.js';
import { projectionReader } from '../../src/projections/quarantine.js';
import { READ_MODELS, createReadModelProjections } from '../../src/projections/read-models.js';
import { rebuild } from '../../src/projections/rebuild.js';
import { loadCheckpoint } from '../../src/projections/checkpoint.js';
import { AsyncProjectionRunner } from '../../src/projections/runner.js';
import { verify } from '../../src/projections/verify.js';
import { BAD_CASES, BAD_EVENTS, appendByHand, appendLimitTwo, fixByHand, namesPlace, quarantineRows } from '../support/bad-events.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { expectClaimableMatchFold, expectReadModelsMatchFold, readModelRows, waitFor } from './support.js';

// Issue 10 part 6, the projections' side: an event that does not decode stops only its stream.
// Async runners hold that stream back (recorded in jl_quarantined) and keep every other key's
// read models and messages up to date; once the event decodes they apply what they held back and
// end the quarantine. Inline projections refuse the append; a rebuild or verify fails naming
// the event and changes nothing.

const opened: { ledger: Ledger; runners: AsyncProjectionRunner[]; db: MigratedDatabase }[] = [];

afterEach(async () => {
  for (const o of opened.splice(0)) {
    await Promise.all(o.runners.map((r) => r.stop()));
    await o.ledger.close();
    await o.db.drop();
  }
});

const lastPosition = async (db: MigratedDatabase): Promise<GlobalPosition> => {
  const { rows } = await db.pool.query(`SELECT transaction_id::text AS c, global_position AS p FROM events ORDER BY transaction_id DESC, global_position DESC LIMIT 1`);
  return rows[0] === undefined ? START : { commit: BigInt(rows[0].c), prepare: BigInt(rows[0].p) };
};

// An async runner reads only below the server's oldest open transaction: others' tests may hold it back a while.
const SLOW = 120_000;

const caughtUp = async (db: MigratedDatabase) => {
  const last = await lastPosition(db);
  for (const name of [READ_MODELS, DISPATCHER]) await waitFor(`${name} past the last event`, async () => comparePositions(await loadCheckpoint(db.pool, name), last) >= 0, SLOW);
};

const openAsync = async () => {
  const db = await createMigratedDatabase(12, { pipeline: true });
  const ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger, inlineProjections: false });
  const store = new PostgresEventStore(db.pool);
  const runner = (name: string, projection: Projection, follows?: string) =>
    new AsyncProjectionRunner({ pool: db.pool, store, name, projections: [projection], retryMs: 200, pollIntervalMs: 50, ...(follows ? { follows } : {}) });
  const runners = [runner(READ_MODELS, createReadModelProjections()), runner(DISPATCHER, createDispatcher(), READ_MODELS)];
  opened.push({ ledger, runners, db });
  for (const r of runners) r.start();
  return { db, ledger };
};

const enqueue = (ledger: Ledger, key: string, n: number, from = 0) =>
  ledger.enqueueMany(Array.from({ length: n }, (_, i) => ({ name: 'work', key, limit: 1, jobId: `${key}-${from + i}` })));

describe.each(BAD_CASES)('an event of %s', (bad) => {
  it("regression (issue 10: one undecodable event stopped the async runners for every key): the other keys' read models and messages keep up; the stream is held back and quarantined, then caught up once it decodes", async () => {
    const { db, ledger } = await openAsync();
    const [badKey, ...healthy] = ['bad', 'g1', 'g2'];
    for (const key of [badKey!, ...healthy]) await enqueue(ledger, key, 2);
    await caughtUp(db);
    const placed = await appendByHand(db.pool, keyStream(badKey!), bad);
    // An event after it that decodes: held back with it, applied once the stream decodes.
    await appendLimitTwo(db.pool, placed.stream);
    for (const key of healthy) await enqueue(ledger, key, 3, 2);
    await caughtUp(db);

    await expectReadModelsMatchFold(db.pool, healthy.map(keyStream));
    expect((await db.pool.query(`SELECT concurrency_limit FROM jl_keys WHERE stream = $1`, [placed.stream])).rows[0].concurrency_limit, 'held back before the bad event').toBe(1);
    const rows = await quarantineRows(db.pool);
    expect(rows).toEqual(
      [DISPATCHER, READ_MODELS].map((name) => ({ ...placed, reader: projectionReader(name), error: expect.stringContaining(BAD_EVENTS[bad].type) })),
    );
    expect((await readLedgerMetrics(db.pool, [])).quarantinedStreams).toBe(1);
    expect((await ledger.keys()).map((k) => [k.key, k.quarantine?.readers ?? null])).toEqual([
      ['bad', [projectionReader(DISPATCHER), projectionReader(READ_MODELS)]],
      ['g1', null],
      ['g2', null],
    ]);

    // Fixed: the runners read it again, apply both held-back events, and the quarantine ends.
    await fixByHand(db.pool, placed);
    await waitFor('the quarantine to end', async () => (await quarantineRows(db.pool)).length === 0, SLOW);
    await caughtUp(db);
    await expectReadModelsMatchFold(db.pool);
    expect((await db.pool.query(`SELECT concurrency_limit FROM jl_keys WHERE stream = $1`, [placed.stream])).rows[0].concurrency_limit).toBe(2);
    await expectClaimableMatchFold(db.pool);
    expect((await readLedgerMetrics(db.pool, [])).quarantinedStreams).toBe(0);
  });

  it('a runner started after the event holds the stream back from the quarantine it finds recorded, not from its checkpoint', async () => {
    const { db, ledger } = await openAsync();
    await enqueue(ledger, 'r-bad', 1);
    await caughtUp(db);
    const placed = await appendByHand(db.pool, keyStream('r-bad'), bad);
    await enqueue(ledger, 'r-good', 1);
    await caughtUp(db);
    const o = opened.at(-1)!;
    await Promise.all(o.runners.map((r) => r.stop()));
    for (const r of o.runners) r.start();
    await appendLimitTwo(db.pool, placed.stream);
    await enqueue(ledger, 'r-good', 2, 1);
    await caughtUp(db);
    expect((await db.pool.query(`SELECT concurrency_limit FROM jl_keys WHERE stream = $1`, [placed.stream])).rows[0].concurrency_limit, 'held back after the restart').toBe(1);
    expect((await quarantineRows(db.pool)).map((q) => [q.reader, q.revision])).toEqual([
      [projectionReader(DISPATCHER), placed.revision],
      [projectionReader(READ_MODELS), placed.revision],
    ]);
    await expectReadModelsMatchFold(db.pool, [keyStream('r-good')]);
  });

  it('inline: an append of it is refused with an EventDecodeError naming the stream and revision (not yet written: no position), and nothing is written', async () => {
    const db = await createMigratedDatabase(4, { pipeline: true });
    const store = new PostgresEventStore(db.pool, { inline: [createReadModelProjections(), createDispatcher()] });
    try {
      const stream = keyStream('inline-bad');
      await expect(store.append(stream, 'no_stream', [BAD_EVENTS[bad]])).rejects.toMatchObject({
        name: 'EventDecodeError',
        stream,
        revision: 0,
        position: null,
        message: expect.stringContaining('revision 0 (global position not yet written)'),
      });
      expect(await store.readStream(stream)).toEqual([]);
    } finally {
      await store.close();
      await db.drop();
    }
  });

  it('replay (rebuild, verify) fails naming the stream, revision and position, and leaves the read models as they were', async () => {
    const db = await createMigratedDatabase(4, { pipeline: true });
    const ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
    try {
      await enqueue(ledger, 'rb-bad', 2);
      await enqueue(ledger, 'rb-good', 2);
      const before = await readModelRows(db.pool);
      const placed = await appendByHand(db.pool, keyStream('rb-bad'), bad);
      await expect(rebuild(db.pool, createReadModelProjections())).rejects.toMatchObject(namesPlace(placed));
      await expect(verify(db.pool, createReadModelProjections())).rejects.toMatchObject(namesPlace(placed));
      expect(await readModelRows(db.pool)).toEqual(before);
    } finally {
      await ledger.close();
      await db.drop();
    }
  });
});

import * as E from 'fp-ts/lib/Either.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { Sweeper } from '../../src/adapters/worker/sweeper.js';
import { enqueueMany, keyEventId, type EnqueueInput } from '../../src/commands/enqueue.js';
import { keyStateAt } from '../../src/commands/key-state-at.js';
import type { CommandResult } from '../../src/commands/key-command.js';
import { KeyWriter } from '../../src/commands/key-writer.js';
import type { Command } from '../../src/domain/commands.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createDispatcher } from '../../src/projections/dispatcher.js';
import { WRITER } from '../../src/projections/quarantine.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { BAD_CASES, appendByHand, fixByHand, namesPlace, quarantineRows } from '../support/bad-events.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';

// Issue 10 part 6, the key writer's side: an event of one key's stream that does not decode
// (appended by hand) fails that key only, in every path of the writer — commands, the worker's
// read-and-start flush, the sweeper's sweep — and in load/state/audit, each error naming the
// stream, revision and global position; the key is recorded as quarantined (jl_quarantined) and
// the quarantine ends at the sweep after the stream decodes again.

let db: MigratedDatabase;
let ledger: Ledger;
const T0 = Date.UTC(2026, 10, 30, 3, 0, 0);
let now = T0;
const DELAY_MS = 1_500;

beforeAll(async () => {
  db = await createMigratedDatabase(10, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: () => now, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

/** A key writer wired as the ledger wires it (inline read models and dispatcher), on a pool of its own, with a short quarantine delay. */
const openWriter = () => {
  const pool = new pg.Pool({ connectionString: db.url, max: 3, pipeline: true } as pg.PoolConfig);
  pool.on('error', () => undefined);
  const store = new PostgresEventStore(pool, { inline: [createReadModelProjections(), createDispatcher()] });
  const writer = new KeyWriter(store, store, { clock: () => now, random: () => 0.5, logger: silentLogger, eventId: keyEventId, passOverMs: DELAY_MS });
  const sweeper = new Sweeper(writer, pool, silentLogger, { clock: () => now, random: () => 0.5 });
  return {
    pool,
    store,
    writer,
    sweeper,
    enqueue: (inputs: readonly EnqueueInput[]) => enqueueMany(writer, inputs, { now: () => now, recorded: (ids) => store.recordedEventIds(ids) }),
    close: async () => {
      await writer.drain();
      await store.close();
      await pool.end();
    },
  };
};

const right = (r: CommandResult) => {
  if (E.isLeft(r)) throw new Error(`refused: ${JSON.stringify(r.left)}`);
  return r.right;
};

const rowOf = async (jobId: string) => (await db.pool.query<{ status: string; lease_id: string | null }>(`SELECT status, lease_id FROM jl_jobs WHERE job_id = $1`, [jobId])).rows[0];

describe.each(BAD_CASES.map((c, i) => [c, i] as const))('a key with an event of %s', (bad, i) => {
  const queue = `quarantine-q${i}`;
  const key = (name: string) => `q${i}-${name}`;

  it("regression (issue 10: one undecodable event stopped the worker's start batch): readAndStart starts the healthy keys' jobs in the same flush; the quarantined key's job stays claimable, passed over by this writer's reads instead of claimed by every flush", async () => {
    const w = openWriter();
    try {
      const healthy = ['a', 'b', 'c', 'd'].map(key);
      await w.enqueue([key('bad'), ...healthy].map((k) => ({ name: 'work', key: k, limit: 1, jobId: `${k}-1`, queue })));
      const placed = await appendByHand(db.pool, keyStream(key('bad')), bad);

      const first = await w.writer.readAndStart({ queue, qty: () => 10, workerId: 'w' });
      expect(first.read).toBe(5);
      expect(first.started.map((s) => s.message.key).sort()).toEqual(healthy);
      expect(await rowOf(`${key('bad')}-1`), 'the job is neither lost nor started').toEqual({ status: 'holding', lease_id: `${key('bad')}-1:1` });
      // Not claimed again meanwhile: no hot loop over the broken key.
      expect((await w.writer.readAndStart({ queue, qty: () => 10, workerId: 'w' })).read).toBe(0);

      expect(await quarantineRows(db.pool, WRITER)).toContainEqual({ ...placed, reader: WRITER, error: expect.stringContaining('does not decode') });
      expect((await ledger.keys()).find((k) => k.key === key('bad'))?.quarantine).toMatchObject({
        revision: placed.revision,
        position: `${placed.position.commit}/${placed.position.prepare}`,
        readers: [WRITER],
      });
      expect((await ledger.keys()).filter((k) => healthy.includes(k.key)).map((k) => k.quarantine)).toEqual([null, null, null, null]);

      // Fixed by an operator: the next sweep reads it again and ends the quarantine; the job starts once the reads stop passing over it.
      await fixByHand(db.pool, placed);
      expect((await w.sweeper.sweep()).unquarantined).toEqual([keyStream(key('bad'))]);
      expect((await quarantineRows(db.pool, WRITER)).filter((q) => q.stream === placed.stream)).toEqual([]);
      expect((await w.writer.readAndStart({ queue, qty: () => 10, workerId: 'w' })).read).toBe(0);
      now += DELAY_MS;
      const later = await until(
        () => w.writer.readAndStart({ queue, qty: () => 10, workerId: 'w' }),
        (r) => r.started.length > 0,
        'the quarantined job to start once its stream decodes',
      );
      expect(later.started.map((s) => s.message.jobId)).toEqual([`${key('bad')}-1`]);
    } finally {
      await w.close();
    }
  });

  it('commands on the key fail with an EventDecodeError naming stream, revision and position; commands on other keys in the same submission batch go on; load, state and audit fail the same way', async () => {
    const w = openWriter();
    try {
      await w.enqueue([key('cmd-bad'), key('cmd-good')].map((k) => ({ name: 'work', key: k, limit: 1, jobId: `${k}-1`, queue: `${queue}-cmd` })));
      const placed = await appendByHand(db.pool, keyStream(key('cmd-bad')), bad);
      const setLimit: Command = { type: 'SetLimit', limit: 2, by: 'test' };
      const results = await Promise.allSettled([w.writer.execute(keyStream(key('cmd-bad')), setLimit), w.writer.execute(keyStream(key('cmd-good')), setLimit)]);
      expect(results[0]).toMatchObject({ status: 'rejected', reason: namesPlace(placed) });
      right((results[1] as PromiseFulfilledResult<CommandResult>).value);

      await expect(w.writer.load(keyStream(key('cmd-bad')))).rejects.toMatchObject(namesPlace(placed));
      await expect(ledger.keyState(key('cmd-bad'))).rejects.toMatchObject(namesPlace(placed));
      await expect(keyStateAt(ledger.store, keyStream(key('cmd-bad')), {})).rejects.toMatchObject(namesPlace(placed));
      // Up to a revision before the event, state still answers: nothing after it is read.
      expect((await keyStateAt(ledger.store, keyStream(key('cmd-bad')), { revision: placed.revision - 1 })).revision).toBe(placed.revision - 1);
      await expect(ledger.audit({ key: key('cmd-bad') })).rejects.toMatchObject(namesPlace(placed));
      expect((await ledger.audit({ key: key('cmd-good') })).events.length).toBeGreaterThan(0);
    } finally {
      await w.close();
    }
  });

  it("the sweeper's sweep expires the healthy keys' leases while one key with an expired lease is quarantined, and records it", async () => {
    const w = openWriter();
    try {
      const sq = `${queue}-sweep`;
      const keys = ['s-bad', 's-1', 's-2', 's-3'].map(key);
      await w.enqueue(keys.map((k) => ({ name: 'work', key: k, limit: 1, jobId: `${k}-1`, queue: sq, leaseMs: 1_000 })));
      expect((await w.writer.readAndStart({ queue: sq, qty: () => 10, workerId: 'w' })).started).toHaveLength(4);
      const placed = await appendByHand(db.pool, keyStream(key('s-bad')), bad);
      now += 60_000;
      await w.sweeper.sweep();
      const expiredOn = (await db.pool.query<{ stream: string }>(`SELECT DISTINCT stream FROM events WHERE type = 'LeaseExpired' AND stream = ANY($1)`, [keys.map(keyStream)])).rows.map((r) => r.stream);
      expect(expiredOn.sort()).toEqual(keys.slice(1).map(keyStream).sort());
      expect(await quarantineRows(db.pool, WRITER)).toContainEqual({ ...placed, reader: WRITER, error: expect.any(String) });
      // Still undecodable: the next sweep leaves it quarantined.
      expect((await w.sweeper.sweep()).unquarantined).toEqual([]);
      expect((await quarantineRows(db.pool, WRITER)).map((q) => q.stream)).toContain(keyStream(key('s-bad')));
    } finally {
      await w.close();
    }
  });
});

describe('issue 21 #3: a quarantined limit key', () => {
  /** A key's holder, started, and a job parked behind it that is also under `limit`. */
  const holderAndWaiter = async (key: string, limit: string) => {
    await ledger.enqueueMany([
      { name: 'work', key, limit: 1, jobId: `${key}-holder`, leaseMs: 5_000 },
      { name: 'work', key, jobId: `${key}-waiter`, limits: [{ key: limit, limit: 1 }] },
    ]);
    const leaseId = (await ledger.keyState(key)).state.jobs[`${key}-holder`]!.lease!.leaseId;
    expect(E.isRight(await ledger.execute(keyStream(key), { type: 'Start', jobId: `${key}-holder`, leaseId, workerId: 'w' }))).toBe(true);
    return leaseId;
  };

  it('blocks no other key: a holder whose line only reaches it completes (before: EventDecodeError, the result dropped, the job run again), and the line is served once it decodes', async () => {
    const leaseId = await holderAndWaiter('q3a', 'q3b');
    const placed = await appendByHand(db.pool, keyStream('q3b'), 'an unknown type');
    const completed = await ledger.execute(keyStream('q3a'), { type: 'Complete', jobId: 'q3a-holder', leaseId });
    expect(E.isRight(completed) && completed.right.events.map((e) => e.type)).toEqual(['JobCompleted', 'SlotReleased']);
    // The waiter needs q3b, which cannot be read: it waits, neither promoted on half its limits nor lost.
    expect((await ledger.keyState('q3a')).state.jobs['q3a-waiter']?.status).toBe('parked');
    await fixByHand(db.pool, placed);
    const sweeper = new Sweeper(ledger, db.pool, silentLogger, { clock: () => now, random: () => 0.5 });
    expect((await sweeper.sweep()).unquarantined).toEqual([keyStream('q3b')]);
    await sweeper.sweep();
    expect((await ledger.keyState('q3a')).state.jobs['q3a-waiter']?.status).toBe('holding');
  });

  it('a lease that could not be renewed or released while its key was quarantined gets one whole lease from the end of the quarantine: its result lands first', async () => {
    await ledger.enqueue({ name: 'work', key: 'q3c', limit: 1, jobId: 'q3c-holder', leaseMs: 5_000 });
    const leaseId = (await ledger.keyState('q3c')).state.jobs['q3c-holder']!.lease!.leaseId;
    expect(E.isRight(await ledger.execute(keyStream('q3c'), { type: 'Start', jobId: 'q3c-holder', leaseId, workerId: 'w' }))).toBe(true);
    const placed = await appendByHand(db.pool, keyStream('q3c'), 'an unknown type');
    const sweeper = new Sweeper(ledger, db.pool, silentLogger, { clock: () => now, random: () => 0.5 });
    await expect(ledger.execute(keyStream('q3c'), { type: 'Renew', jobId: 'q3c-holder', leaseId })).rejects.toMatchObject(namesPlace(placed));
    await sweeper.sweep();
    now += 60_000;
    await fixByHand(db.pool, placed);
    // The quarantine ends at this sweep; the lease ran out long ago, but it is not expired now.
    const holding = async () => (await ledger.keyState('q3c')).state.jobs['q3c-holder']?.lease?.leaseId;
    expect(await sweeper.sweep()).toMatchObject({ unquarantined: [keyStream('q3c')] });
    expect(await holding()).toBe(leaseId);
    // Another sweeper leads from here (the first one's connection dropped): the grace is the ledger's, not the first sweeper's memory.
    const next = new Sweeper(ledger, db.pool, silentLogger, { clock: () => now, random: () => 0.5 });
    now += 1_000;
    await next.sweep();
    expect(await holding()).toBe(leaseId);
    const completed = await ledger.execute(keyStream('q3c'), { type: 'Complete', jobId: 'q3c-holder', leaseId });
    expect(E.isRight(completed)).toBe(true);
  });
  it('regression (the model checker, seeds 100045, 100105, 100480: a completed job ran again): a sweep that read its candidates before the fix, and expires after it, gives the lease its grace from the flush that reads the stream fine again', async () => {
    await ledger.enqueue({ name: 'work', key: 'q3d', limit: 1, jobId: 'q3d-holder', leaseMs: 5_000 });
    const leaseId = (await ledger.keyState('q3d')).state.jobs['q3d-holder']!.lease!.leaseId;
    expect(E.isRight(await ledger.execute(keyStream('q3d'), { type: 'Start', jobId: 'q3d-holder', leaseId, workerId: 'w' }))).toBe(true);
    const placed = await appendByHand(db.pool, keyStream('q3d'), 'an unknown type');
    // The worker's result cannot be recorded (the key does not decode), and the writer records the quarantine.
    await expect(ledger.execute(keyStream('q3d'), { type: 'Complete', jobId: 'q3d-holder', leaseId })).rejects.toMatchObject(namesPlace(placed));
    expect((await quarantineRows(db.pool, WRITER)).map((q) => q.stream)).toContain(keyStream('q3d'));
    now += 60_000;
    // The sweep read the quarantines (still broken: no grace) and its candidates; the stream is fixed; then its ExpireLeases is decided.
    await fixByHand(db.pool, placed);
    const expired = await ledger.execute(keyStream('q3d'), { type: 'ExpireLeases', jitter: 0.5 });
    expect(E.isRight(expired) && expired.right.events).toEqual([]);
    expect((await ledger.keyState('q3d')).state.jobs['q3d-holder']?.lease?.leaseId).toBe(leaseId);
    // Its result lands within the grace.
    now += 1_000;
    expect(E.isRight(await ledger.execute(keyStream('q3d'), { type: 'Complete', jobId: 'q3d-holder', leaseId }))).toBe(true);
  });

  it('regression (the model checker, seeds 100210, 100239: a completed job ran again): a lease whose job is under a limit key that was quarantined gets one whole lease from the end of that quarantine, though its own key never was', async () => {
    await ledger.enqueue({ name: 'work', key: 'q3e', limit: 1, jobId: 'q3e-holder', leaseMs: 5_000, limits: [{ key: 'q3e-cap', limit: 2 }] });
    const leaseId = (await ledger.keyState('q3e')).state.jobs['q3e-holder']!.lease!.leaseId;
    expect(E.isRight(await ledger.execute(keyStream('q3e'), { type: 'Start', jobId: 'q3e-holder', leaseId, workerId: 'w' }))).toBe(true);
    const placed = await appendByHand(db.pool, keyStream('q3e-cap'), 'an unknown type');
    // The result releases the cap's slot too: it cannot be recorded while the cap does not decode.
    await expect(ledger.execute(keyStream('q3e'), { type: 'Complete', jobId: 'q3e-holder', leaseId })).rejects.toMatchObject(namesPlace(placed));
    const sweeper = new Sweeper(ledger, db.pool, silentLogger, { clock: () => now, random: () => 0.5 });
    now += 60_000;
    await fixByHand(db.pool, placed);
    // The quarantine was recorded though nothing but the failed Complete read the cap.
    expect((await sweeper.sweep()).unquarantined).toContain(keyStream('q3e-cap'));
    now += 1_000;
    await sweeper.sweep();
    expect((await ledger.keyState('q3e')).state.jobs['q3e-holder']?.lease?.leaseId).toBe(leaseId);
    expect(E.isRight(await ledger.execute(keyStream('q3e'), { type: 'Complete', jobId: 'q3e-holder', leaseId }))).toBe(true);
    // A lease past its grace does expire: the grace bounds the wait, it does not pin the slot.
    await ledger.enqueue({ name: 'work', key: 'q3e', jobId: 'q3e-next', leaseMs: 5_000, limits: [{ key: 'q3e-cap', limit: 2 }] });
    const next = (await ledger.keyState('q3e')).state.jobs['q3e-next']!.lease!.leaseId;
    expect(E.isRight(await ledger.execute(keyStream('q3e'), { type: 'Start', jobId: 'q3e-next', leaseId: next, workerId: 'w' }))).toBe(true);
    now += 60_000;
    await sweeper.sweep();
    expect((await ledger.keyState('q3e')).state.jobs['q3e-next']?.lease?.leaseId).not.toBe(next);
  });
});

import * as E from 'fp-ts/lib/Either.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// Issue 21, item 4 (DESIGN.md invariant 9): a decision rests only on state that was current when
// it committed. Two processes (two ledgers, each with its own pool, key writer and cache of key
// states). P1 wrote a limit key last and trusts its cached state of it (the optimistic path, which
// skips the lock); P2 changes that key. P1's next decision READS the key without appending to it:
// before the fix the commit checked only the streams it appended to, so P1 decided on the stale copy.

let db: MigratedDatabase;
let p1: Ledger;
let p2: Ledger;
const pools: pg.Pool[] = [];

const open = async (): Promise<Ledger> => {
  const pool = new pg.Pool({ connectionString: db.url, max: 4, pipeline: true } as pg.PoolConfig);
  pool.on('error', () => undefined);
  pools.push(pool);
  return createLedger({ pool, migrate: false, logger: silentLogger });
};

beforeAll(async () => {
  db = await createMigratedDatabase(2, { pipeline: true });
  p1 = await open();
  p2 = await open();
});

afterAll(async () => {
  await p1?.close();
  await p2?.close();
  for (const pool of pools) await pool.end();
  await db?.drop();
});

/** Starts and completes `jobId` of `key` from `by`, as a worker of that process would. */
const runToEnd = async (by: Ledger, key: string, jobId: string) => {
  const leaseId = (await by.keyState(key)).state.jobs[jobId]!.lease!.leaseId;
  expect(E.isRight(await by.execute(keyStream(key), { type: 'Start', jobId, leaseId, workerId: 'w' }))).toBe(true);
  expect(E.isRight(await by.execute(keyStream(key), { type: 'Complete', jobId, leaseId }))).toBe(true);
};

describe('issue 21 #4: an optimistic flush decides on a stale copy of a stream it only reads', () => {
  it('a whenFull "reject" enqueue is never rejected for a limit that was free when it committed (measured before: "limit b full" with b at 0 of 1)', async () => {
    // P1 writes the limit key last: X holds it (and P1 writes the home a2 last, with Z).
    await p1.enqueue({ name: 'z', key: 'sr-a2', limit: 5, jobId: 'sr-z' });
    await p1.enqueue({ name: 'x', key: 'sr-a1', limit: 1, jobId: 'sr-x', limits: [{ key: 'sr-b', limit: 1 }] });
    // P2 frees it: X ran and completed there.
    await runToEnd(p2, 'sr-a1', 'sr-x');
    expect((await p2.keyState('sr-b')).state.holding).toBe(0);
    // P1 still holds b as full in its cache; its enqueue reads b and appends to a2 alone.
    const y = await p1.enqueue({ name: 'y', key: 'sr-a2', jobId: 'sr-y', limits: [{ key: 'sr-b', limit: 1 }], whenFull: 'reject' });
    expect(y.status).toBe('acquired');
    const rejected = (await p1.store.readStream(keyStream('sr-a2'))).filter((e) => e.type === 'JobRejected');
    expect(rejected).toEqual([]);
  });

  it('a job under two limits is never left parked with both of them free (measured before: until a sweeper pass, and with none, for ever)', async () => {
    // J waits under a and b, both full: P1 holds a's slot (H1), P2 holds b's (H2).
    await p1.enqueue({ name: 'h1', key: 'st-a', limit: 1, jobId: 'st-h1' });
    await p2.enqueue({ name: 'h2', key: 'st-home2', limit: 5, jobId: 'st-h2', limits: [{ key: 'st-b', limit: 1 }] });
    await p1.enqueue({ name: 'j', key: 'st-a', jobId: 'st-j', limits: [{ key: 'st-b', limit: 1 }] });
    expect((await p1.keyState('st-a')).state.jobs['st-j']?.status).toBe('parked');
    // P2 writes a last too (a no-op on it), so it trusts its copy of a from here.
    await p2.pause({ key: 'st-a', by: 'ops' });
    await p2.resume({ key: 'st-a', by: 'ops' });
    // P1 frees a: J still needs b, full (H2), so it waits. Then P2 frees b: its line reaches J, whose
    // other limit a P2 only reads, from its cache, where H1 still holds it.
    await runToEnd(p1, 'st-a', 'st-h1');
    await runToEnd(p2, 'st-home2', 'st-h2');
    await p1.drain();
    await p2.drain();
    expect((await p1.keyState('st-a')).state.jobs['st-j']?.status).toBe('holding');
  });

  it('regression (model checker, seed 420041): a cancel that frees a limit key does not promote its guest on a stale copy of the guest\'s home (it failed with a TypeError); decided again on what the streams hold', async () => {
    // P1 writes the home sr-h last (an admission, then its cancel: the copy P1 keeps has no job and room).
    await p1.enqueue({ name: 'a', key: 'sr-h', limit: 1, jobId: 'sr-h0' });
    expect(await p1.cancel({ jobId: 'sr-h0', by: 'op1' })).toMatchObject({ cancelled: true });
    // P2 pauses the home and enqueues G there under the limit key sr-l: G waits in both lines.
    await p2.pause({ key: 'sr-h', by: 'op2' });
    expect((await p2.enqueue({ name: 'g', key: 'sr-h', jobId: 'sr-g', limits: [{ key: 'sr-l', limit: 1 }] })).status).toBe('parked');
    // P1 takes sr-l's free slot (G is blocked by its paused home) and writes sr-l and sr-k2 last.
    expect((await p1.enqueue({ name: 'c', key: 'sr-k2', limit: 2, jobId: 'sr-c', limits: [{ key: 'sr-l' }] })).status).toBe('acquired');
    // P1 locks sr-l once more and finds nobody else wrote it since: it trusts its copies from now on.
    expect((await p1.enqueue({ name: 'd', key: 'sr-k2', jobId: 'sr-d', limits: [{ key: 'sr-l' }] })).status).toBe('parked');
    // P1 cancels C: sr-l's slot frees and its line reaches G, whose home P1 trusts from before G.
    expect(await p1.cancel({ jobId: 'sr-c', by: 'op1' })).toMatchObject({ cancelled: true });
    // The home is paused: G is not promoted; D, behind it and free on both of its keys, is.
    expect((await p2.keyState('sr-h')).state.jobs['sr-g']!.status).toBe('parked');
    expect((await p2.keyState('sr-k2')).state.jobs['sr-d']!.status).toBe('holding');
    // Once the home resumes, G waits for sr-l's slot, which D holds.
    await p2.resume({ key: 'sr-h', by: 'op2' });
    expect((await p2.keyState('sr-h')).state.jobs['sr-g']!.status).toBe('parked');
  });
});

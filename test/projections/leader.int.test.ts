import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projectionLockSql } from '../../src/projections/checkpoint.js';
import { AdvisoryLeader, LeadershipLostError, type AdvisoryLock } from '../../src/projections/leader.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

// The leader election the sweeper and the async runners share (src/projections/leader.ts): one
// session holds the lock, a lost session loses it, and `pid` names the session pg_locks shows.

let db: TestDatabase;
let pool: pg.Pool;

beforeAll(async () => {
  db = await createTestDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 2 });
  pool.on('error', () => undefined);
});

afterAll(async () => {
  await pool?.end();
  await db?.drop();
});

const LOCK: AdvisoryLock = { key: projectionLockSql(1), values: ['leader-test'] };
const connect = () => AdvisoryLeader.connect({ connectionString: db.url }, LOCK);

/** The sessions holding LOCK, as the server sees them. */
const holders = async (): Promise<number[]> =>
  (
    await pool.query<{ pid: number }>(
      `SELECT l.pid FROM pg_locks l, (SELECT ${projectionLockSql(1)} AS k) h
       WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
         AND l.classid = ((h.k >> 32) & 4294967295)::oid AND l.objid = (h.k & 4294967295)::oid`,
      ['leader-test'],
    )
  ).rows.map((r) => r.pid);

/** Two sessions on LOCK, released however the test ends. */
const withTwo = async (fn: (first: AdvisoryLeader, second: AdvisoryLeader) => Promise<void>): Promise<void> => {
  const first = await connect();
  const second = await connect();
  try {
    await fn(first, second);
  } finally {
    await first.release();
    await second.release();
  }
};

/** `first`, leading, is lost through `lose`: `lost` rejects, it no longer leads, and `second` takes the lock. */
const expectTakeOver = async (first: AdvisoryLeader, second: AdvisoryLeader, lose: () => Promise<unknown>): Promise<void> => {
  await lose();
  await expect(first.lost).rejects.toThrow();
  expect(first.leading).toBe(false);
  expect(await second.tryLead()).toBe(true);
  expect(await holders()).toEqual([second.pid]);
};

describe('AdvisoryLeader', () => {
  it('one session leads: a second is refused until the first releases; pid is the lock session pg_locks shows', () =>
    withTwo(async (first, second) => {
      expect(() => first.pid).toThrow(/not leading/);
      expect(await first.tryLead()).toBe(true);
      expect(first.leading).toBe(true);
      expect(await holders()).toEqual([first.pid]);
      expect(await second.tryLead()).toBe(false);
      expect(second.leading).toBe(false);
      // A rebuild's transaction lock on the same key is refused too: one applier per projection.
      expect((await pool.query<{ ok: boolean }>(`SELECT pg_try_advisory_xact_lock(${projectionLockSql(1)}) AS ok`, ['leader-test'])).rows[0]!.ok).toBe(false);
      await expectTakeOver(first, second, () => first.release());
      await expect(first.lost).rejects.toBeInstanceOf(LeadershipLostError);
    }));

  it('a leader whose session is terminated is lost, and the lock is free for a successor', () =>
    withTwo(async (first, second) => {
      expect(await first.tryLead()).toBe(true);
      await expectTakeOver(first, second, () => pool.query('SELECT pg_terminate_backend($1)', [first.pid]));
    }));
});

import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { runCliInProcess } from './in-process.js';

// FAILURE-MODES.md #16: no way to release 390k stuck jobs but a console (solid_queue #478). The
// operator's CLI (in process: the entry main.ts runs) frees thousands of stuck jobs of a key in a
// few calls, each event recorded with who did it, and touches nothing of any other key.

let db: MigratedDatabase;
let ledger: Ledger;

beforeAll(async () => {
  db = await createMigratedDatabase(6, { pipeline: true });
  ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

const jobledger = (...args: string[]) => runCliInProcess(db.url, args);

/** Runs the command line, expecting exit 0, and parses its --json output. */
const cliJson = async <T>(...args: string[]): Promise<T> => {
  const result = await jobledger(...args, '--json');
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as T;
};

/** A limit-1 key whose holder was started by a worker that is gone (an hour's lease), with `parked` jobs in line behind it. */
const stuckKey = async (key: string, prefix: string, parked: number): Promise<string[]> => {
  const holder = `${prefix}-holder`;
  await ledger.enqueue({ name: 'work', key, limit: 1, leaseMs: 3_600_000, jobId: holder });
  const lease = (await ledger.keyState(key)).state.jobs[holder]!.lease!.leaseId;
  const started = await ledger.execute(keyStream(key), { type: 'Start', jobId: holder, leaseId: lease, workerId: 'gone-worker' });
  expect(E.isRight(started)).toBe(true);
  const ids = Array.from({ length: parked }, (_, i) => `${prefix}-${String(i).padStart(4, '0')}`);
  for (let i = 0; i < ids.length; i += 1_000) await ledger.enqueueMany(ids.slice(i, i + 1_000).map((jobId) => ({ name: 'work', key, jobId })));
  return ids;
};

/** What the read models hold of a key: its jobs' rows, slots, line and dispatch messages (its jobs waiting to be claimed). */
const rowsOf = async (key: string) => {
  const q = async (sql: string) => (await db.pool.query(sql, [key])).rows;
  return {
    jobs: await q(`SELECT job_id, status, attempts, updated_at FROM jl_jobs WHERE key = $1 ORDER BY job_id`),
    slots: await q(`SELECT job_id, lease_id, expires_at, worker_id FROM jl_slots WHERE key = $1 ORDER BY job_id`),
    parked: await q(`SELECT job_id FROM jl_parked WHERE key = $1 ORDER BY job_id`),
    messages: await q(`SELECT job_id, lease_id, acquired_at FROM jl_jobs WHERE key = $1 AND status = 'holding' ORDER BY job_id`),
  };
};

describe('FAILURE-MODES #16: no way to release 390k stuck jobs but a console (solid_queue #478)', () => {
  it('3,000 jobs stuck behind a dead holder: release, set-limit and discard free or drop them all in three calls, every event recorded with who, no other key touched', async () => {
    const key = 'fm16:stuck';
    const parked = await stuckKey(key, 'stuck', 3_000);
    await stuckKey('fm16:bystander', 'bystander', 5);
    const bystanderBefore = await rowsOf('fm16:bystander');
    const { rows: marks } = await db.pool.query<{ last: string }>('SELECT max(global_position)::text AS last FROM events');
    const before = marks[0]!.last;

    // The dead holder's slot goes to the first in line: forced, since its worker is gone and its lease runs an hour.
    expect(await cliJson('release', '--key', key, '--by', 'alice', '--force')).toEqual({ released: ['stuck-holder'], stopping: [] });
    // A raise admits 999 more in the same call.
    const raised = await cliJson<{ limit: number; promoted: string[] }>('set-limit', '--key', key, '--limit', '1000', '--by', 'bob');
    expect(raised).toEqual({ limit: 1000, promoted: parked.slice(1, 1_000) });
    // The other 2,000 are dropped, in one call.
    expect(await cliJson('discard', '--key', key, '--by', 'carol')).toEqual({ discarded: parked.slice(1_000) });

    // Every holder listed: a detail lists the first 100 unless asked for up to 1,000.
    const detail = await ledger.keyDetail(key, undefined, 1_000);
    expect(detail?.counts.holders).toBe(1_000);
    expect(detail?.holders.map((h) => h.jobId).sort()).toEqual(parked.slice(0, 1_000));
    expect(detail?.parked).toEqual([]);
    const { rows: statuses } = await db.pool.query<{ status: string; n: number }>(`SELECT status, count(*)::int AS n FROM jl_jobs WHERE key = $1 GROUP BY status ORDER BY status`, [key]);
    // The revoked holder had started: it is retried later, holding no slot meanwhile.
    expect(statuses).toEqual([
      { status: 'discarded', n: 2_000 },
      { status: 'holding', n: 1_000 },
      { status: 'scheduled', n: 1 },
    ]);

    // Every event since is of this key, came from the CLI, and each operator event names its operator.
    const { rows: since } = await db.pool.query<{ stream: string; type: string; by: string | null; via: string | null }>(
      `SELECT stream, type, data->>'by' AS by, metadata->>'via' AS via FROM events WHERE global_position > $1 ORDER BY global_position`,
      [before],
    );
    expect(new Set(since.map((e) => e.stream))).toEqual(new Set([keyStream(key)]));
    expect(since.every((e) => e.via === 'cli')).toBe(true);
    const count = (type: string, by: string) => since.filter((e) => e.type === type && e.by === by).length;
    expect([count('LeaseRevoked', 'alice'), count('KeyLimitSet', 'bob'), count('ParkedDiscarded', 'carol')]).toEqual([1, 1, 2_000]);
    expect(since.filter((e) => ['LeaseRevoked', 'KeyLimitSet', 'ParkedDiscarded'].includes(e.type))).toHaveLength(2_002);
    expect(since.filter((e) => e.type === 'JobPromoted')).toHaveLength(1_000);

    // The other key's rows and messages are as they were.
    expect(await rowsOf('fm16:bystander')).toEqual(bystanderBefore);
  });
});

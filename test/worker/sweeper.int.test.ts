import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { Sweeper } from '../../src/adapters/worker/sweeper.js';
import type { CommandResult, KeyCommand } from '../../src/commands/key-command.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';

// The sweeper's own parts: its leadership (one active sweeper, a session advisory lock; a leader
// whose connection ends steps down and leads again at a later tick) and its time (candidates are
// found on the injected clock, never the server's now()). The commands it submits are recorded,
// not executed: what they decide is the key writer's tests'.

let db: MigratedDatabase;
let ledger: Ledger;
// Years from the server's clock, either way: only the injected clock can make the job due.
const T0 = Date.UTC(2041, 0, 1);
let now = T0;

beforeAll(async () => {
  db = await createMigratedDatabase(6);
  ledger = await createLedger({ pool: db.pool, migrate: false, clock: () => now, logger: silentLogger });
});

afterAll(async () => {
  await ledger?.close();
  await db?.drop();
});

const recordingWriter = () => {
  const submitted: KeyCommand[] = [];
  return { submitted, executeMany: async (items: readonly KeyCommand[]): Promise<CommandResult[]> => (submitted.push(...items), []) };
};

const sweeper = (writer = recordingWriter(), intervalMs = 50) => new Sweeper(writer, db.pool, silentLogger, { clock: () => now, random: () => 0.25, intervalMs });

/** The sessions holding the sweeper's lock in this database. */
const holders = async (): Promise<number[]> =>
  (
    await db.pool.query<{ pid: number }>(
      `SELECT l.pid FROM pg_locks l, (SELECT hashtextextended('jobledger:sweeper', 0) AS k) h
       WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
         AND l.classid = ((h.k >> 32) & 4294967295)::oid AND l.objid = (h.k & 4294967295)::oid`,
    )
  ).rows.map((r) => r.pid);

describe('sweeper', () => {
  it('one sweeper leads; another is refused at its tick; a leader whose connection ends steps down and leads again on a new one; stop lets the lock go', async () => {
    const first = sweeper();
    const second = sweeper();
    first.start();
    try {
      await until(async () => first.isLeader, Boolean, 'the first sweeper to lead');
      const [old] = await holders();
      expect(old).toBeDefined();
      // start() ticks at once and stop() waits for that tick: exactly one try, refused.
      second.start();
      await second.stop();
      expect(second.isLeader).toBe(false);

      await db.pool.query('SELECT pg_terminate_backend($1)', [old]);
      const again = await until(async () => ({ pids: await holders(), leading: first.isLeader }), (s) => s.leading && s.pids.length === 1 && s.pids[0] !== old, 'the first sweeper to lead again on a new session');
      expect(again.pids).toHaveLength(1);
    } finally {
      await first.stop();
      await second.stop();
    }
    expect(first.isLeader).toBe(false);
    await until(holders, (pids) => pids.length === 0, 'the lock to be free');
  });

  it('finds due jobs on the injected clock ($1), not the server time: a job due in the clock\'s future is not a candidate until the clock passes it', async () => {
    const key = 'sweep-clock';
    await ledger.enqueueMany([{ name: 'later', key, jobId: 'sweep-clock-1', runAt: T0 + 3_600_000 }]);
    const writer = recordingWriter();
    const s = sweeper(writer);
    const admits = () => writer.submitted.filter((c) => c.stream === keyStream(key) && c.command.type === 'AdmitDue');
    now = T0 + 3_599_000;
    await s.sweep();
    expect(admits()).toEqual([]);
    now = T0 + 3_600_000;
    await s.sweep();
    expect(admits()).toHaveLength(1);
  });

  it('draws the jitter of each expired lease from the injected random source', async () => {
    const key = 'sweep-random';
    await ledger.enqueueMany([{ name: 'held', key, jobId: 'sweep-random-1', leaseMs: 1_000 }]);
    const { rows } = await db.pool.query<{ lease_id: string }>('SELECT lease_id FROM jl_slots WHERE job_id = $1', ['sweep-random-1']);
    const started = await ledger.execute(keyStream(key), { type: 'Start', jobId: 'sweep-random-1', leaseId: rows[0]!.lease_id, workerId: 'w' });
    expect(E.isRight(started)).toBe(true);
    const writer = recordingWriter();
    now += 60_000;
    await sweeper(writer).sweep();
    expect(writer.submitted.filter((c) => c.stream === keyStream(key)).map((c) => c.command)).toEqual([{ type: 'ExpireLeases', jitter: 0.25 }]);
  });

  it('issue 21 #7: after an outage, no lease expires within one lease length of its end: a worker\'s queued completion lands first, and the job does not run again', async () => {
    const key = 'sweep-outage';
    await ledger.enqueueMany(['done-in-outage', 'silent'].map((jobId) => ({ name: 'held', key, limit: 2, jobId, leaseMs: 10_000 })));
    const startAt = now;
    for (const jobId of ['done-in-outage', 'silent']) {
      const leaseId = (await ledger.keyState(key)).state.jobs[jobId]!.lease!.leaseId;
      expect(E.isRight(await ledger.execute(keyStream(key), { type: 'Start', jobId, leaseId, workerId: 'w' }))).toBe(true);
    }
    // The process's view of the database (the Outages port): an outage ends at startAt + 60 s.
    const outages = { generation: 0, failed: () => false, answered: () => undefined };
    const s = new Sweeper(ledger, db.pool, silentLogger, { clock: () => now, random: () => 0.25, outages });
    await s.sweep();
    now = startAt + 60_000;
    outages.generation = 1;
    // Both leases ran out during the outage: before the fix, this sweep expired them, and the job completed meanwhile ran again.
    expect((await s.sweep()).expired).toBe(0);
    const leaseId = (await ledger.keyState(key)).state.jobs['done-in-outage']!.lease!.leaseId;
    now = startAt + 61_000;
    expect(E.isRight(await ledger.execute(keyStream(key), { type: 'Complete', jobId: 'done-in-outage', leaseId }))).toBe(true);
    now = startAt + 69_999;
    expect((await s.sweep()).expired).toBe(0);
    // One lease after the outage ended, the one that stayed silent expires; the completed one is not touched.
    now = startAt + 70_000;
    expect((await s.sweep()).expired).toBe(1);
    const types = (await ledger.store.readStream(keyStream(key))).map((e) => `${e.type} ${String(e.data.jobId ?? '')}`);
    expect(types.filter((t) => t.startsWith('LeaseExpired') || t.startsWith('JobCompleted'))).toEqual(['JobCompleted done-in-outage', 'LeaseExpired silent']);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger, type Ledger } from '../../../src/adapters/ledger.js';
import { CLAIM_SQL, claimStatement } from '../../../src/adapters/queue/job-queue.js';
import { keyEventId } from '../../../src/commands/enqueue.js';
import { KeyWriter } from '../../../src/commands/key-writer.js';
import { silentLogger } from '../../../src/domain/ports/logger.js';
import { keyStream } from '../../../src/domain/streams.js';
import { createDispatcher } from '../../../src/projections/dispatcher.js';
import { createReadModelProjections } from '../../../src/projections/read-models.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/database.js';

// The dispatch queue since migration 0015: a job's jl_jobs row is its message, and a worker's read
// claims it with CLAIM_SQL (FOR UPDATE SKIP LOCKED) in the transaction that starts it. What that
// statement must guarantee, with real concurrent transactions.

let db: MigratedDatabase;
let ledger: Ledger;

beforeAll(async () => {
  db = await createMigratedDatabase(8);
  ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
});

afterAll(async () => {
  await ledger.close();
  await db.drop();
});

/** A transaction left open on a client of its own, with CLAIM_SQL run in it. */
const openClaim = async (queue: string, qty: number, skip: { streams?: string[]; jobs?: string[] } = {}) => {
  const client = await db.pool.connect();
  await client.query('BEGIN');
  const claim = claimStatement({ queue, qty, skipStreams: skip.streams ?? [], skipJobs: skip.jobs ?? [] });
  const { rows } = await client.query<{ jobId: string; stream: string; leaseId: string; attempt: number }>(claim.text, claim.values as unknown[]);
  return {
    rows,
    end: async () => {
      await client.query('ROLLBACK');
      client.release();
    },
  };
};

describe('CLAIM_SQL: a worker\'s read of a queue', () => {
  it('two readers claiming at once get disjoint jobs (the rows one holds are skipped by the other), oldest admission first; a rollback makes them claimable again', async () => {
    await ledger.enqueueMany(Array.from({ length: 6 }, (_, i) => ({ name: 'w', jobId: `cq-${i}`, queue: 'cq' })));
    const first = await openClaim('cq', 4);
    const second = await openClaim('cq', 4);
    try {
      expect(first.rows).toHaveLength(4);
      expect(second.rows).toHaveLength(2);
      const ids = [...first.rows, ...second.rows].map((r) => r.jobId);
      expect(new Set(ids).size).toBe(6);
      expect(first.rows.every((r) => r.attempt === 1 && r.stream === `job:${r.jobId}`)).toBe(true);
    } finally {
      await first.end();
      await second.end();
    }
    const again = await openClaim('cq', 10);
    try {
      expect(again.rows).toHaveLength(6);
    } finally {
      await again.end();
    }
  });

  it('a job started after the reader\'s snapshot was taken, and before it locked the row, is not claimed: the status condition is checked again on the row\'s newest version', async () => {
    await ledger.enqueue({ name: 'w', key: 'cq-epq', limit: 1, jobId: 'cq-epq-1', queue: 'cq-epq' });
    const starter = await db.pool.connect();
    try {
      // A transaction that has locked the row (as a claim does) and will start the job.
      await starter.query('BEGIN');
      await starter.query(`SELECT 1 FROM jl_jobs WHERE job_id = 'cq-epq-1' FOR UPDATE`);
      await starter.query(`UPDATE jl_jobs SET status = 'running', worker_id = 'w', expires_at = now() + interval '1 minute' WHERE job_id = 'cq-epq-1'`);
      // A blocking read (FOR UPDATE without SKIP LOCKED, as CLAIM_SQL but waiting) takes its snapshot now and waits for the row.
      const waiting = db.pool.query(CLAIM_SQL.replace('SKIP LOCKED', ''), ['cq-epq', 10, [], []]);
      await new Promise((r) => setTimeout(r, 200));
      await starter.query('COMMIT');
      expect((await waiting).rows).toEqual([]);
    } finally {
      starter.release();
    }
  });

  it('passes over the streams and the jobs it is told to skip', async () => {
    await ledger.enqueueMany([
      { name: 'w', key: 'cq-skip-a', jobId: 'cq-s-1', queue: 'cq-skip' },
      { name: 'w', key: 'cq-skip-b', jobId: 'cq-s-2', queue: 'cq-skip' },
      { name: 'w', jobId: 'cq-s-3', queue: 'cq-skip' },
    ]);
    const claim = await openClaim('cq-skip', 10, { streams: [keyStream('cq-skip-a')], jobs: ['cq-s-3'] });
    try {
      expect(claim.rows.map((r) => r.jobId)).toEqual(['cq-s-2']);
    } finally {
      await claim.end();
    }
  });

  it('an operator cancelling an admission a reader has claimed (row locked, waiting for the key) does not deadlock for good: one of the two is run again, the job is cancelled and never started', async () => {
    await ledger.enqueue({ name: 'w', key: 'cq-cancel', limit: 1, jobId: 'cq-c-1', queue: 'cq-cancel' });
    // A worker's key writer in a process of its own (its own states and transactions), as the ledger wires one.
    const store = new PostgresEventStore(db.pool, { inline: [createReadModelProjections(), createDispatcher()] });
    const reader = new KeyWriter(store, store, { logger: silentLogger, eventId: keyEventId });
    try {
      const [cancelled, read] = await Promise.all([
        ledger.cancel({ jobId: 'cq-c-1', by: 'ops' }),
        reader.readAndStart({ queue: 'cq-cancel', qty: () => 1, workerId: 'w' }),
      ]);
      const events = await ledger.store.readStream(keyStream('cq-cancel'));
      const types = events.map((e) => e.type);
      if (read.started.length === 1) {
        // The read went first: the job started, and the cancel revoked its lease (it is stopping, cancelled once its handler stops).
        expect(cancelled).toMatchObject({ cancelled: true, stopping: true });
        expect(events.find((e) => e.type === 'LeaseRevoked')?.data).toMatchObject({ cancel: true });
      } else {
        expect(cancelled).toMatchObject({ cancelled: true, stopping: false });
        expect(types).not.toContain('JobStarted');
        expect(types).toContain('JobCancelled');
      }
      // Nothing left to claim: cancelled (or stopping, its row running).
      const left = await openClaim('cq-cancel', 10);
      expect(left.rows).toEqual([]);
      await left.end();
    } finally {
      await reader.drain();
      await store.close();
    }
  });
});

import * as fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// DESIGN.md invariant 10 as a property: every limit a job is under (its key, its stacked limits,
// its queue's cap) is held by the ledger, whichever process enqueued the job and however that
// process was configured. Two processes (ledgers with their own pools and caches), one opened with
// the queue's cap and one without, enqueue at random, at once: every job of the capped queue is
// under its cap (its JobEnqueued names queue:<name>), and the cap's holders never pass it.

let db: MigratedDatabase;
let capped: Ledger;
let plain: Ledger;
const pools: pg.Pool[] = [];
const CAP = 2;

const open = async (queues?: Record<string, { maxConcurrent: number }>): Promise<Ledger> => {
  const pool = new pg.Pool({ connectionString: db.url, max: 4, pipeline: true } as pg.PoolConfig);
  pool.on('error', () => undefined);
  pools.push(pool);
  return createLedger({ pool, migrate: false, logger: silentLogger, ...(queues === undefined ? {} : { queues }) });
};

beforeAll(async () => {
  db = await createMigratedDatabase(2, { pipeline: true });
  capped = await open({ mail: { maxConcurrent: CAP } });
  plain = await open();
});

afterAll(async () => {
  await capped?.close();
  await plain?.close();
  for (const pool of pools) await pool.end();
  await db?.drop();
});

const arrival = fc.record({
  byPlain: fc.boolean(),
  queue: fc.constantFrom('mail', 'mail', 'other'),
  key: fc.option(fc.constantFrom('a', 'b', 'c'), { nil: null }),
  limit: fc.option(fc.constantFrom('t'), { nil: null }),
});

describe('invariant 10: a queue cap holds whichever process enqueues', () => {
  it('property: every job of the capped queue is under its cap, and the cap never holds more than its limit', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(arrival, { minLength: 1, maxLength: 12 }), async (arrivals) => {
        run++;
        const jobIds = arrivals.map((_, i) => `p${run}-${i}`);
        await Promise.all(
          arrivals.map((a, i) =>
            (a.byPlain ? plain : capped).enqueue({
              name: 'send',
              jobId: jobIds[i]!,
              queue: a.queue,
              ...(a.key === null ? {} : { key: `${a.key}${run}`, limit: 3 }),
              ...(a.limit === null || a.key === null ? {} : { limits: [{ key: `${a.limit}${run}`, limit: 5 }] }),
            }),
          ),
        );
        const { rows } = await db.pool.query<{ job_id: string; queue: string; limits: string[] | null }>(
          `SELECT data->>'jobId' AS job_id, data->>'queue' AS queue, ARRAY(SELECT jsonb_array_elements_text(data->'limits')) AS limits
           FROM events WHERE type = 'JobEnqueued' AND data->>'jobId' = ANY($1)`,
          [jobIds],
        );
        expect(rows).toHaveLength(arrivals.length);
        for (const r of rows) expect(r.limits?.includes('queue:mail') ?? false, `${r.job_id} of queue ${r.queue}`).toBe(r.queue === 'mail');
        expect((await capped.keyState('queue:mail')).state.holding).toBeLessThanOrEqual(CAP);
      }),
      { numRuns: 15, seed: 20_261_202 },
    );
    expect((await capped.store.readStream(keyStream('queue:mail'))).filter((e) => e.type === 'KeyLimitSet')).toHaveLength(1);
  }, 120_000);
});

describe('issue 21 #2: a process that never saw a queue cap acts on a job under it', () => {
  it('a cancel from a process opened without the cap, of a job it has not seen parked under the cap, is decided with the cap stream locked (the model checker, seed 20212: "a decision wrote to key:queue:q1, which it took to be absent")', async () => {
    const withCap = await open({ post: { maxConcurrent: 2 } });
    const without = await open();
    try {
      // The plain process knows the key (its own job holds it) but not the cap stream: it never enqueued to the queue.
      await without.enqueue({ name: 'hold', jobId: 'cc-0', key: 'cc', limit: 1, queue: 'other' });
      // Enqueued by the other process: parked behind cc-0, under the cap.
      expect(await withCap.enqueue({ name: 'send', jobId: 'cc-1', key: 'cc', queue: 'post' })).toMatchObject({ status: 'parked' });
      await withCap.enqueue({ name: 'send', jobId: 'cc-2', key: 'cc', queue: 'post' });
      expect(await without.cancel({ jobId: 'cc-1', by: 'ops' })).toMatchObject({ cancelled: true });
      expect(await without.cancel({ jobId: 'cc-0', by: 'ops' })).toMatchObject({ cancelled: true });
      // cc-2 took the key's slot and one of the cap's; the cap stream says so.
      expect((await withCap.keyState('queue:post')).state.holding).toBe(1);
      expect((await withCap.keyState('cc')).state.jobs['cc-2']?.status).toBe('holding');
    } finally {
      await withCap.close();
      await without.close();
    }
  }, 60_000);
});

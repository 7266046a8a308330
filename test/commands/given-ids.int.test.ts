import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { projectionMode } from '../../src/adapters/postgres/projection-mode.js';
import type { EnqueueInput, Enqueued } from '../../src/commands/enqueue.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { verify } from '../../src/projections/verify.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { runProcesses } from '../support/processes.js';

// Issue 22, lever 6: no unique index on every event id. Enqueue idempotency by job id rests on
// unique_event_ids, written only for a job id the caller gave (a JobEnqueued whose id is
// uuidv5(jobId)), in the append's transaction. Two OS processes, each a ledger of its own, enqueue
// the same given ids at once: a job without a key (one stream, job:<id>, created unlocked by
// both), or with a key of its process's own (so no key state can tell the other's job apart).

const PROCESS = new URL('../fixtures/enqueue-process.mjs', import.meta.url).pathname;
const DIST_INDEX = new URL('../../dist/src/index.js', import.meta.url).pathname;

let db: MigratedDatabase;

beforeAll(async () => {
  db = await createMigratedDatabase(4);
  await projectionMode(db.pool, 'inline');
});

afterAll(async () => {
  await db?.drop();
});

describe('issue 22: a given job id enqueued twice from two processes at once', () => {
  it('is recorded once: one process says acquired, the other duplicate, and the ledger holds one JobEnqueued of it', async () => {
    // The fixture runs the built library: npm test builds dist/ before vitest.
    expect(existsSync(DIST_INDEX), `${DIST_INDEX} is missing: run npm run build`).toBe(true);
    for (let round = 0; round < 3; round++) {
      const ids = Array.from({ length: 24 }, (_, i) => `given-${round}-${i}`);
      const input = (p: number, jobId: string, i: number): EnqueueInput => ({ name: 'work', jobId, ...(i % 3 === 0 ? {} : { key: `given-${p}-${i % 4}`, limit: 50 }) });
      // Four batches a process, in another order in each: the ids meet in different flushes.
      const batchesOf = (p: number) => [0, 1, 2, 3].map((b) => ids.map((id, i) => input(p, id, i)).filter((_, i) => (p === 0 ? i : ids.length - 1 - i) % 4 === b));
      const stats = await runProcesses<{ enqueued: Enqueued[] }>(PROCESS, [0, 1].map((p) => ({ databaseUrl: db.url, batches: batchesOf(p) })));
      const statuses = new Map<string, string[]>();
      for (const s of stats) for (const e of s.enqueued) statuses.set(e.jobId, [...(statuses.get(e.jobId) ?? []), e.status]);
      for (const id of ids) {
        expect(statuses.get(id)!.sort(), id).toEqual(['acquired', 'duplicate']);
      }
      const { rows } = await db.pool.query<{ job: string; n: number }>(
        `SELECT data ->> 'jobId' AS job, count(*)::int AS n FROM events WHERE type = 'JobEnqueued' AND data ->> 'jobId' = ANY($1) GROUP BY 1`,
        [ids],
      );
      expect(rows.sort((x, y) => (x.job < y.job ? -1 : 1))).toEqual([...ids].sort().map((job) => ({ job, n: 1 })));
    }
    expect((await verify(db.pool, createReadModelProjections())).differences).toEqual([]);
  });
});

import { describe, expect, it } from 'vitest';
import { createTestDatabase } from '../support/database.js';
import { runModel } from './harness.js';

// The model-based, multi-process checker (./harness.ts runs a seed, ./checks.ts judges it): a few
// seeds in every `npm test`; `npm run check:model -- --runs N [--seed S]` (./check-model.mjs) runs
// more and prints the seed of each failure. One seed is replayed with
// JOBLEDGER_MODEL_SEED=S JOBLEDGER_MODEL_RUNS=1 npx vitest run --project int test/model.

const runs = Number(process.env.JOBLEDGER_MODEL_RUNS ?? 3);
const first = Number(process.env.JOBLEDGER_MODEL_SEED ?? 2112);
const operations = Number(process.env.JOBLEDGER_MODEL_OPERATIONS ?? 90);
/** check:model's batches of seeds: a thin run (few handlers, no cancel) is said, not failed; the suite's own seeds must not be thin. */
const batch = process.env.JOBLEDGER_MODEL_SEED !== undefined;

describe('model: several ledgers, workers and operators at random (issue 21)', () => {
  for (let i = 0; i < runs; i++) {
    const seed = first + i;
    it(`seed ${seed}: no limit exceeded, nothing run twice, no false rejection, nothing stranded, the audit and the read models true`, async () => {
      const db = await createTestDatabase();
      try {
        const result = await runModel({ databaseUrl: db.url, seed, operations });
        if (result.violations.length > 0) {
          console.error(
            `model seed ${seed} failed (replay: JOBLEDGER_MODEL_SEED=${seed} JOBLEDGER_MODEL_RUNS=1 npx vitest run --project int test/model):\n` +
              `${result.violations.map((v) => `  [${v.check}] ${v.message}`).join('\n')}\n--- run log ---\n${result.log.join('\n')}`,
          );
        }
        console.log(`model seed ${seed}: ${JSON.stringify(result.stats)}`);
        expect(result.violations, `seed ${seed}`).toEqual([]);
        // The run did what it is for: handlers ran, and operators acted on them. In a batch, a seed
        // whose inputs happen to be thin (an early poison that blocks most jobs) checked what it reached.
        const { handlerRuns = 0, cancel = 0 } = result.stats;
        if (batch && (handlerRuns <= 10 || cancel === 0)) console.log(`model seed ${seed}: thin run (${handlerRuns} handler runs, ${cancel} cancels), no violation`);
        else {
          expect(result.stats.handlerRuns).toBeGreaterThan(10);
          expect(result.stats.cancel).toBeGreaterThan(0);
        }
      } finally {
        await db.drop();
      }
    }, 180_000);
  }
});

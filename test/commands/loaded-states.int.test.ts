import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { T0, openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';

// The key writer's load keeps the states it gave and brings them up by the events after them
// (src/commands/loaded-states.ts). What it gives must be what a load from the snapshot and the
// events gives: a writer of its own (another process), with nothing kept, is the reference.

let s: ScriptedLedger;
let fresh: () => Promise<Ledger>;

beforeAll(async () => {
  s = await openScriptedLedger();
  s.at(T0);
  await s.ledger.enqueue({ name: 'sync', key: 'kept', limit: 2, jobId: 'first' });
  fresh = () => createLedger({ pool: s.db.pool, migrate: false, clock: () => T0, logger: silentLogger });
});

afterAll(async () => {
  await s?.close();
});

const freshState = async (key: string) => {
  const other = await fresh();
  try {
    return await other.keyState(key);
  } finally {
    await other.close();
  }
};

describe('load keeps the states it gave and brings them up to date', () => {
  it('after writes of this process and of another, and after a tail longer than it folds (the snapshot then), it gives what a fresh load gives', async () => {
    const other = await fresh();
    try {
      let n = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(fc.constantFrom('enqueue', 'enqueue-elsewhere', 'complete', 'many'), { minLength: 1, maxLength: 6 }), async (steps) => {
          for (const step of steps) {
            if (step === 'enqueue') await s.ledger.enqueue({ name: 'sync', key: 'kept', jobId: `k${n++}` });
            if (step === 'enqueue-elsewhere') await other.enqueue({ name: 'sync', key: 'kept', jobId: `k${n++}` });
            if (step === 'many') await s.ledger.enqueueMany(Array.from({ length: 600 }, () => ({ name: 'sync', key: 'kept', whenFull: 'reject' as const })));
            if (step === 'complete') {
              const holder = Object.entries((await s.ledger.keyState('kept')).state.jobs).find(([, j]) => j.lease !== null);
              if (holder !== undefined) {
                await s.start('kept', holder[0]);
                await s.complete('kept', holder[0]);
              }
            }
            expect(await s.ledger.keyState('kept')).toEqual(await freshState('kept'));
          }
        }),
        { numRuns: 8, seed: 2312 },
      );
    } finally {
      await other.close();
    }
  }, 120_000);
});

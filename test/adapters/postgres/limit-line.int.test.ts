import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { limitLine } from '../../../src/adapters/postgres/queries/limit-line.js';
import { lineOf } from '../../../src/domain/explain.js';
import { holders } from '../../../src/domain/key-state.js';
import { keyStream } from '../../../src/domain/streams.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../../support/ledger.js';
import { shownLine } from '../../support/limit-line.js';

// An explanation of now reads a limit key's line from the read models (limitLine) instead of
// loading the key's state: both must give the same figures, pause, holders, and each job's place
// and the jobs ahead of it. Random histories of keys under stacked limits (own jobs and guests,
// priorities, starts, completions, failures, operator releases, pauses), each compared with the
// state the key writer loads, for every job parked on every key and one that is in no line.

/** Each key's limit (one per key: a key's limit is set once). */
const KEYS = { a: 1, b: 2, c: 1 } as const;
const LIMIT_KEYS = { x: 1, y: 2 } as const;

type Step =
  | { readonly kind: 'enqueue'; readonly key: number; readonly priority: number; readonly under: readonly boolean[]; readonly own: boolean }
  | { readonly kind: 'start' | 'complete' | 'fail' | 'release'; readonly key: number; readonly pick: number }
  | { readonly kind: 'pause' | 'resume'; readonly key: number };

const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ kind: fc.constant('enqueue' as const), key: fc.nat(9), priority: fc.integer({ min: 0, max: 2 }), under: fc.array(fc.boolean(), { minLength: 2, maxLength: 2 }), own: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ kind: fc.constantFrom('start' as const, 'complete' as const, 'fail' as const, 'release' as const), key: fc.nat(9), pick: fc.nat(9) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom('pause' as const, 'resume' as const), key: fc.nat(9) }) },
);

let s: ScriptedLedger;
beforeAll(async () => {
  s = await openScriptedLedger();
});
afterAll(async () => {
  await s?.close();
});

describe("a limit key's line from the read models", () => {
  it('is the line of its state, whatever happened on its keys (property)', async () => {
    let run = 0;
    /** Parked jobs whose place was compared, over every history: the property is not vacuous. */
    let places = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 5, maxLength: 40 }), async (steps) => {
        // Each history on keys of its own.
        const name = (k: string) => `r${run}-${k}`;
        run++;
        const keys = Object.keys(KEYS).map(name);
        const limitKeys = Object.keys(LIMIT_KEYS).map(name);
        const limitOf = (key: string) => ({ ...KEYS, ...LIMIT_KEYS })[key.slice(key.indexOf('-') + 1) as keyof typeof KEYS];
        let t = T0;
        let n = 0;
        for (const st of steps) {
          s.at((t += SEC));
          if (st.kind === 'enqueue') {
            // A key's own job, or a job of another key under some of the limit keys.
            const key = st.own ? limitKeys[st.key % limitKeys.length]! : keys[st.key % keys.length]!;
            const limits = limitKeys.filter((l, i) => st.under[i] && l !== key).map((l) => ({ key: l, limit: limitOf(l) }));
            await s.ledger.enqueue({ name: 'j', key, limit: limitOf(key), jobId: `${key}-${n++}`, priority: st.priority, ...(limits.length > 0 ? { limits } : {}) });
          } else if (st.kind === 'pause' || st.kind === 'resume') {
            const key = limitKeys[st.key % limitKeys.length]!;
            const { state } = await s.ledger.keyState(key);
            if (state.limit === 0) continue; // no job named it yet: nothing to pause
            const paused = state.paused !== undefined;
            if (st.kind === 'pause' && !paused) await s.ledger.pause({ key, by: 'ops', reason: 'test' });
            if (st.kind === 'resume' && paused) await s.ledger.resume({ key, by: 'ops' });
          } else {
            const all = [...keys, ...limitKeys];
            const key = all[st.key % all.length]!;
            const held = holders((await s.ledger.keyState(key)).state).filter((h) => h.home === undefined && h.lease?.revoked === undefined);
            const job = held[(st as Extract<Step, { pick: number }>).pick % Math.max(held.length, 1)];
            if (job === undefined) continue;
            const started = job.lease!.workerId !== null;
            if (st.kind === 'start' && !started) await s.start(key, job.jobId);
            else if (st.kind === 'complete' && started) await s.complete(key, job.jobId);
            else if (st.kind === 'fail' && started) await s.fail(key, job.jobId, 'boom');
            else if (st.kind === 'release') await s.ledger.release({ key, jobId: job.jobId, by: 'ops' });
          }
        }
        // What the appends set off on other keys (a line waiting on further limits) is written.
        await s.ledger.drain();
        for (const key of [...keys, ...limitKeys]) {
          const stream = keyStream(key);
          const { state } = await s.ledger.keyState(key);
          if (state.limit === 0) continue; // never seen
          const parked = Object.keys(state.jobs).filter((j) => state.jobs[j]!.status === 'parked');
          places += parked.length;
          for (const jobId of [...parked, 'in-no-line']) {
            const read = await limitLine(s.db.pool, stream, jobId);
            expect(read, `${jobId} on ${key}`).toBeDefined();
            expect(shownLine(read!), `${jobId} on ${key}`).toEqual(shownLine(lineOf({ stream, state, startedAt: new Map() }, jobId)));
          }
        }
      }),
      { numRuns: 60, seed: 20261205, endOnFailure: true },
    );
    expect(places).toBeGreaterThan(100);
  }, 240_000);

  it('a started holder shows its worker and expiry, as the state does, and a parked guest its place', async () => {
    s.at(T0);
    await s.ledger.enqueue({ name: 'j', key: 'hx', limit: 1, jobId: 'hx0' });
    await s.start('hx', 'hx0', 'w7');
    await s.ledger.enqueue({ name: 'j', key: 'h', limit: 1, jobId: 'h1', limits: [{ key: 'hx' }] });
    await s.ledger.drain();
    const { state } = await s.ledger.keyState('hx');
    const read = await limitLine(s.db.pool, keyStream('hx'), 'h1');
    expect(shownLine(read!)).toEqual(shownLine(lineOf({ stream: keyStream('hx'), state, startedAt: new Map() }, 'h1')));
    expect(read!.holders).toEqual([{ jobId: 'hx0', lease: expect.objectContaining({ workerId: 'w7', expiresAt: expect.any(Number) }) }]);
    expect(read!.place).toEqual({ n: 1, of: 1 });
  });
});

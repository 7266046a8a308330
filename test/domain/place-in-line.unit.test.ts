import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { initialKeyState, lineAfter, placeInLine, type JobState, type KeyState } from '../../src/domain/key-state.js';
import { runScenario, scenarioArb } from './arbitraries.js';

// An explanation finds a parked job's place in its key's line in one pass (placeInLine) instead of
// ordering the whole line (lineAfter): both must give the same place and the same jobs ahead.

/** The place and the first `shown` ahead, from the ordered line. */
const fromLine = (state: KeyState, jobId: string, shown: number) => {
  const line = lineAfter(state, Infinity);
  const at = line.indexOf(jobId);
  return at < 0 ? null : { place: { n: at + 1, of: line.length }, ahead: line.slice(0, Math.min(at, shown)) };
};

describe('placeInLine', () => {
  it('is the place in lineAfter\'s line, and its first jobs ahead, for every job of every state of generated histories (property)', () => {
    let parked = 0;
    fc.assert(
      fc.property(scenarioArb(), fc.integer({ min: 1, max: 12 }), (scenario, shown) => {
        for (const { after } of runScenario(scenario).steps) {
          for (const jobId of [...Object.keys(after.jobs), 'not-a-job']) {
            if (after.jobs[jobId]?.status === 'parked') parked++;
            expect(placeInLine(after, jobId, shown)).toEqual(fromLine(after, jobId, shown));
          }
        }
      }),
      { numRuns: 200, seed: 20261205 },
    );
    expect(parked).toBeGreaterThan(500);
  });

  it('orders by priority, then by the order the jobs joined the line', () => {
    const job = (priority: number, seq: number, status: JobState['status'] = 'parked'): JobState => ({
      status, priority, seq, attempts: 0, maxAttempts: 1, leaseMs: 1000, queue: 'q', runAt: null, parkedAt: 0, lease: null,
    });
    const state: KeyState = { ...initialKeyState, jobs: { a: job(1, 0), b: job(0, 5), c: job(0, 2), d: job(2, 1), h: job(0, 0, 'holding'), e: job(1, 3) } };
    expect(placeInLine(state, 'd', 10)).toEqual({ place: { n: 5, of: 5 }, ahead: ['c', 'b', 'a', 'e'] });
    expect(placeInLine(state, 'd', 2)).toEqual({ place: { n: 5, of: 5 }, ahead: ['c', 'b'] });
    expect(placeInLine(state, 'c', 10)).toEqual({ place: { n: 1, of: 5 }, ahead: [] });
    expect(placeInLine(state, 'h', 10)).toBeNull();
  });
});

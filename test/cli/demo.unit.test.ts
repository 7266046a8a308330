import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { largestOverlap, type TimedRun } from '../../src/adapters/cli/commands/demo.js';

const run = (start: number, end: number): TimedRun => ({ key: 'k', start, end });

describe('demo: largestOverlap (handlers of a key running at once)', () => {
  it.each([
    [[], 0],
    [[run(0, 10)], 1],
    [[run(0, 10), run(10, 20)], 1], // one ends as the next starts: never two at once
    [[run(0, 10), run(9.5, 20)], 2],
    [[run(0, 100), run(10, 20), run(15, 30), run(25, 40)], 3],
    [[run(0, 5), run(6, 8), run(7, 9)], 2],
  ])('%j -> %i', (runs, expected) => {
    expect(largestOverlap(runs)).toBe(expected);
  });

  it('is the most runs open at any start time (a brute-force count)', () => {
    const runs = fc.array(
      fc.tuple(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 1, max: 20 })).map(([s, d]) => run(s, s + d)),
      { maxLength: 30 },
    );
    fc.assert(
      fc.property(runs, (rs) => {
        const atStarts = rs.map((r) => rs.filter((o) => o.start <= r.start && r.start < o.end).length);
        expect(largestOverlap(rs)).toBe(Math.max(0, ...atStarts));
      }),
    );
  });
});

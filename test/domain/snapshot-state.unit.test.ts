import fc from 'fast-check';
import * as E from 'fp-ts/lib/Either.js';
import { describe, expect, it } from 'vitest';
import { KeyStateCodec, snapshotState } from '../../src/domain/key-state.js';
import { runScenario, scenarioArb } from './arbitraries.js';

// A snapshot is checked with the codec's guard rather than decoded (snapshotState): the guard must
// accept exactly the snapshots decode accepts, and what it accepts must be what decode would build.
// States come from generated histories (every shape the decider makes); damage replaces or removes
// one value anywhere in them, as a broken or foreign snapshot would.

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

/** Every path to a value inside `value` (the root excluded). */
const pathsOf = (value: Json, prefix: (string | number)[] = []): (string | number)[][] => {
  if (value === null || typeof value !== 'object') return [];
  const keys: (string | number)[] = Array.isArray(value) ? value.map((_, i) => i) : Object.keys(value);
  return keys.flatMap((k) => [[...prefix, k], ...pathsOf((value as Record<string | number, Json>)[k]!, [...prefix, k])]);
};

/** `value` with the value at `path` replaced (or removed, for `undefined`). */
const damaged = (value: Json, path: readonly (string | number)[], by: Json | undefined): Json => {
  const copy = structuredClone(value) as Record<string | number, Json>;
  let at = copy;
  for (const k of path.slice(0, -1)) at = at[k] as Record<string | number, Json>;
  const last = path.at(-1)!;
  if (by === undefined) delete at[last];
  else at[last] = by;
  return copy as Json;
};

const agree = (snapshot: unknown): void => {
  const decoded = KeyStateCodec.decode(snapshot);
  const checked = snapshotState(snapshot);
  expect(checked !== undefined, String(JSON.stringify(snapshot)).slice(0, 400)).toBe(E.isRight(decoded));
  if (E.isRight(decoded)) expect(checked).toEqual(decoded.right);
};

describe('snapshotState accepts what KeyStateCodec decodes', () => {
  it('every state a generated history passes through, as JSON', () => {
    fc.assert(
      fc.property(scenarioArb(30), (scenario) => {
        for (const step of runScenario(scenario).steps) agree(JSON.parse(JSON.stringify(step.after)));
      }),
      { numRuns: 150 },
    );
  });

  it('the same states with one value replaced or removed anywhere', () => {
    const value = fc.oneof(fc.constant(undefined), fc.constant(null), fc.boolean(), fc.integer(), fc.double(), fc.string(), fc.constant([]), fc.constant({}), fc.jsonValue());
    fc.assert(
      fc.property(scenarioArb(30), fc.nat(), value, (scenario, pick, by) => {
        const states = runScenario(scenario).steps.map((s) => JSON.parse(JSON.stringify(s.after)) as Json);
        const state = states.at(-1);
        if (state === undefined) return;
        const paths = pathsOf(state);
        if (paths.length === 0) return;
        agree(damaged(state, paths[pick % paths.length]!, by as Json | undefined));
      }),
      { numRuns: 500 },
    );
  });

  it('not an object at all', () => {
    for (const snapshot of [null, undefined, 0, 'state', [], [{}], true]) agree(snapshot);
  });
});

import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import * as E from 'fp-ts/lib/Either.js';
import { describe, expect, it } from 'vitest';
import { decodeCommand, type Command, type JobSpec } from '../../src/domain/commands.js';
import { decideAcross, type AcrossOutcome } from '../../src/domain/decide/index.js';
import { mk, type KeyEvent } from '../../src/domain/events.js';
import { Scratch, apply, draftOf, fold, initialKeyState, type Draft, type JobState, type KeyState } from '../../src/domain/key-state.js';
import { keyStream } from '../../src/domain/streams.js';
import { driveScenario, jitterArb, pickArb, scenarioArb, sometimes, stackedWorld, stateOf, withDt, type Intent, type JobIntent, type Scenario, type States } from './stacked-model.js';
import { givenAcross, limitHeld, limitReleased, limitWaiting, type Streams } from './spec-across.js';
import { SEC, T0, acquired, completed, enqueued, job, limitSet, parked, promoted, released, started } from './spec.js';

// One fair order for jobs under stacked limits (commit 9538580): a job under further limits is
// promoted only when every one of its lines has room AND no job ahead of it in any of its lines
// could take a slot there at that moment. Regression specs for the bugs that rule fixed, a chain
// that needs another line served first ('after'), and a property over random command sequences.

const H1 = keyStream('h1');
const H2 = keyStream('h2');
const H3 = keyStream('h3');
const T = keyStream('t');
const U = keyStream('u');

const under = (jobId: string, keys: readonly string[], overrides: Partial<JobSpec> = {}): JobSpec =>
  job(jobId, { limits: keys.map((key) => ({ key })), ...overrides });

describe('one fair order across stacked limits: regressions', () => {
  const now = T0 + 10 * SEC;

  it('regression: a job yielded at shutdown does not re-take its key\'s slot ahead of a job waiting before it there', () => {
    // h1 (limit 1): a (under t and u) holds; p (no further limit, priority -1) waits at h1.
    const a = under('a', ['t', 'u']);
    const p = job('p', { priority: -1 });
    const step = givenAcross({
      [H1]: [limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0 + SEC), enqueued(p), parked('p')],
      [T]: [limitSet(1), limitHeld('a', H1, ['t', 'u'], 'a:1')],
      [U]: [limitSet(1), limitHeld('a', H1, ['t', 'u'], 'a:1')],
    }).when({ type: 'Yield', jobId: 'a', leaseId: 'a:1' }, H1, now);
    step.then({
      [H1]: [mk('JobYielded', { jobId: 'a', leaseId: 'a:1', attempts: 0, at: now }), released('a', 'a:1', 'yielded', now), parked('a', now), promoted('p', 'p:2', now, 10 * SEC)],
      [T]: [limitReleased('a', 'a:1', 'yielded', now), limitWaiting('a', H1, ['t', 'u'], 0, now)],
      [U]: [limitReleased('a', 'a:1', 'yielded', now), limitWaiting('a', H1, ['t', 'u'], 0, now)],
    });
    // a waits everywhere, behind p at home; t and u keep their freed slots (a's home is full).
    const states = step.states();
    expect(states.get(H1)!.jobs['a']).toMatchObject({ status: 'parked', lease: null });
    expect(states.get(H1)!.jobs['p']).toMatchObject({ status: 'holding' });
    for (const s of [T, U]) {
      expect(states.get(s)!.jobs['a']).toMatchObject({ status: 'parked', home: H1 });
      expect(states.get(s)!.holding).toBe(0);
    }
  });

  // a of h1 under t holds both; c of h3 under t waits on t (joined it first); b of h1 under t
  // waits at h1 and on t, joined after c. d (no further limit) waits at h1 after b.
  const a = under('a', ['t']);
  const b = under('b', ['t']);
  const c = under('c', ['t']);
  const d = job('d');
  const contested = (withD: boolean): Streams => ({
    [H1]: [
      limitSet(1),
      enqueued(a),
      acquired('a', 'a:1'),
      started('a', 'a:1', T0 + SEC),
      enqueued(b, T0 + 2 * SEC),
      parked('b', T0 + 2 * SEC),
      ...(withD ? [enqueued(d, T0 + 3 * SEC), parked('d', T0 + 3 * SEC)] : []),
    ],
    [H3]: [limitSet(1), enqueued(c, T0 + SEC), parked('c', T0 + SEC)],
    [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('c', H3, ['t'], 0, T0 + SEC), limitWaiting('b', H1, ['t'], 0, T0 + 2 * SEC)],
  });

  it("regression: a release does not give a limit key's slot to a job of the releasing key when a job of another key waited in that limit's line before it", () => {
    // c takes t (and its home h3); b stays parked (t is full again); h1's freed slot goes to d.
    const step = givenAcross(contested(true)).when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, H1, now);
    step.then({
      [H1]: [completed('a', 'a:1', now), released('a', 'a:1', 'completed', now), promoted('d', 'd:2', now, 7 * SEC)],
      [T]: [limitReleased('a', 'a:1', 'completed', now), limitHeld('c', H3, ['t'], 'c:1', now, 9 * SEC)],
      [H3]: [promoted('c', 'c:1', now, 9 * SEC)],
    });
    const states = step.states();
    expect(states.get(H1)!.jobs['b']).toMatchObject({ status: 'parked' });
    expect(states.get(T)!.jobs['b']).toMatchObject({ status: 'parked' });
  });

  it("regression (no other job at the releasing key): c takes t, b stays parked, and h1's freed slot stays free", () => {
    const step = givenAcross(contested(false)).when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, H1, now);
    step.then({
      [H1]: [completed('a', 'a:1', now), released('a', 'a:1', 'completed', now)],
      [T]: [limitReleased('a', 'a:1', 'completed', now), limitHeld('c', H3, ['t'], 'c:1', now, 9 * SEC)],
      [H3]: [promoted('c', 'c:1', now, 9 * SEC)],
    });
    const states = step.states();
    expect(states.get(H1)!.holding).toBe(0);
    expect(states.get(H1)!.jobs['b']).toMatchObject({ status: 'parked' });
  });

  it("chain: the first eligible job in the one fair order is only found by serving another line first ('after'), and it is promoted", () => {
    // Three keys (h1, h2, h3, limit 1 each) and two limits (t, u, limit 1 each).
    // r of h1 under t and u holds all three of its lines.
    // j3 of h3 under u joined u first; j2 of h2 under t and u joined t and u next;
    // j1 of h1 under t joined h1 and t last.
    // r completes: t is served first (r's first limit). Its head j2 has room in every line (h2, t,
    // u), but j3 is ahead of j2 in u and can take a slot there: u is served first ('after'), j3 is
    // promoted; j2 is then blocked (u full) and j1, next on t, takes t and h1.
    const r = under('r', ['t', 'u']);
    const j1 = under('j1', ['t']);
    const j2 = under('j2', ['t', 'u']);
    const j3 = under('j3', ['u']);
    const history: Streams = {
      [H1]: [limitSet(1), enqueued(r), acquired('r', 'r:1'), started('r', 'r:1', T0 + SEC), enqueued(j1, T0 + 3 * SEC), parked('j1', T0 + 3 * SEC)],
      [H2]: [limitSet(1), enqueued(j2, T0 + 2 * SEC), parked('j2', T0 + 2 * SEC)],
      [H3]: [limitSet(1), enqueued(j3, T0 + SEC), parked('j3', T0 + SEC)],
      [T]: [limitSet(1), limitHeld('r', H1, ['t', 'u'], 'r:1'), limitWaiting('j2', H2, ['t', 'u'], 0, T0 + 2 * SEC), limitWaiting('j1', H1, ['t'], 0, T0 + 3 * SEC)],
      [U]: [limitSet(1), limitHeld('r', H1, ['t', 'u'], 'r:1'), limitWaiting('j3', H3, ['u'], 0, T0 + SEC), limitWaiting('j2', H2, ['t', 'u'], 0, T0 + 2 * SEC)],
    };
    const step = givenAcross(history).when({ type: 'Complete', jobId: 'r', leaseId: 'r:1' }, H1, now);
    step.then({
      [H1]: [completed('r', 'r:1', now), released('r', 'r:1', 'completed', now), promoted('j1', 'j1:2', now, 7 * SEC)],
      [T]: [limitReleased('r', 'r:1', 'completed', now), limitHeld('j1', H1, ['t'], 'j1:2', now, 7 * SEC)],
      [U]: [limitReleased('r', 'r:1', 'completed', now), limitHeld('j3', H3, ['u'], 'j3:1', now, 9 * SEC)],
      [H3]: [promoted('j3', 'j3:1', now, 9 * SEC)],
    });
    const states = step.states();
    for (const s of [H2, T, U]) expect(states.get(s)!.jobs['j2']).toMatchObject({ status: 'parked' });
    // The promotions pass the property's own check.
    const log = decideLogged({ type: 'Complete', jobId: 'r', leaseId: 'r:1' }, H1, statesOf(history), now);
    const findings = fairnessFindings(statesOf(history), log.log);
    expect(findings.violations).toEqual([]);
    expect(findings.checked).toBe(2);
    expect(findings.contested).toBeGreaterThan(0);
  });
});

// ---------------------------------------------------------------------------------------------
// The check: at the moment a job J under further limits takes its slots (JobPromoted or
// SlotAcquired at its home), no job X parked ahead of J in one of J's lines could have taken its
// slots instead: X had room in every one of its lines at that moment, and X is still parked after
// the decision.
//
// "At that moment" is the states the decision's events before J's admission leave, in the order the
// decision applied them across streams (recorded through the Scratch each stream is decided on).
// The states before the whole decision would make the check vacuous: every decision starts from a
// quiescent state, where no parked job has room in all its lines (limits-invariants (c)), and a
// release's freed slots are only there after its SlotReleased.

const statesOf = (history: Streams): Map<string, KeyState> => new Map(Object.entries(history).map(([s, events]) => [s, fold(initialKeyState, events)]));

/** A Scratch that records every event applied through it, in the order the decision applied them across streams. */
class LoggingScratch extends Scratch {
  constructor(
    draft: Draft,
    private readonly stream: string,
    private readonly log: { stream: string; event: KeyEvent }[],
  ) {
    super(draft);
  }

  override apply(event: KeyEvent): void {
    this.log.push({ stream: this.stream, event });
    super.apply(event);
  }
}

/** decideAll, with the order its events were applied in across streams (empty for a refusal). */
const decideLogged = (command: Command, stream: string, states: States, now: number): { readonly outcome: AcrossOutcome; readonly log: readonly { stream: string; event: KeyEvent }[] } => {
  const log: { stream: string; event: KeyEvent }[] = [];
  const scratches = new Map<string, Scratch>();
  const outcome = decideAcross(
    command,
    stream,
    (s) => {
      let scratch = scratches.get(s);
      if (scratch === undefined) scratches.set(s, (scratch = new LoggingScratch(draftOf(stateOf(states, s)), s, log)));
      return scratch;
    },
    now,
  );
  const accepted = outcome.tag === 'decided' && E.isRight(outcome.result);
  if (accepted) {
    // The log must be exactly what the decision wrote, stream by stream.
    const perStream = new Map<string, KeyEvent[]>();
    for (const { stream: s, event } of log) perStream.set(s, [...(perStream.get(s) ?? []), event]);
    for (const [s, events] of outcome.result.right) {
      if (!isDeepStrictEqual(perStream.get(s) ?? [], events)) throw new Error(`the recorded order of ${s}'s events differs from what the decision wrote`);
    }
  }
  return { outcome, log: accepted ? log : [] };
};

const linesOf = (job: JobState, at: string): string[] => [job.home ?? at, ...(job.limits ?? []).map(keyStream)];
const hasRoom = (d: KeyState): boolean => d.paused === undefined && d.holding < d.limit;
const precedes = (x: Pick<JobState, 'priority' | 'seq'>, y: Pick<JobState, 'priority' | 'seq'>): boolean => x.priority < y.priority || (x.priority === y.priority && x.seq < y.seq);

interface Findings {
  /** Admissions of jobs under further limits checked (promotions: JobPromoted; the rest SlotAcquired). */
  checked: number;
  promotions: number;
  /** Of those, the ones where some job was parked ahead of J in one of its lines (the check had something to reject). */
  contested: number;
  /** Jobs that could have taken J's slots and were promoted later in the same decision (legitimate). */
  sameDecision: number;
  violations: string[];
}

/**
 * Replays a decision's events in the order it applied them, and at each admission of a job under
 * further limits at its home, looks in each of its lines for a job parked ahead of it that could
 * have taken its slots.
 */
const fairnessFindings = (before: States, log: readonly { stream: string; event: KeyEvent }[], into: Findings = { checked: 0, promotions: 0, contested: 0, sameDecision: 0, violations: [] }): Findings => {
  const drafts = new Map<string, Draft>();
  const draft = (s: string): Draft => {
    let d = drafts.get(s);
    if (d === undefined) drafts.set(s, (d = draftOf(stateOf(before, s))));
    return d;
  };
  // The states after the decision, to tell a job passed over from one promoted later in it.
  const after = new Map<string, Draft>();
  for (const { stream, event } of log) {
    let d = after.get(stream);
    if (d === undefined) after.set(stream, (d = draftOf(stateOf(before, stream))));
    apply(d, event);
  }
  const afterOf = (s: string): KeyState => after.get(s) ?? stateOf(before, s);
  const candidates: { at: number; stream: string; jobId: string; suspects: { x: string; line: string; why: string }[] }[] = [];
  log.forEach(({ stream, event }, at) => {
    if (event.type === 'JobPromoted' || event.type === 'SlotAcquired') {
      const j = draft(stream).jobs[event.data.jobId];
      if (j !== undefined && j.home === undefined && j.limits !== undefined) {
        const suspects: { x: string; line: string; why: string }[] = [];
        let contested = false;
        for (const line of linesOf(j, stream)) {
          // J's place in the line: its entry there while it waits; an admission (SlotAcquired) is of a
          // job not waiting, which would take a new place at the back of every line (key-state JobParked).
          const entry = event.type === 'JobPromoted' ? draft(line).jobs[event.data.jobId] : undefined;
          if (event.type === 'JobPromoted' && entry?.status !== 'parked') {
            into.violations.push(`${event.data.jobId} promoted at ${stream} while not parked on its line ${line} (${entry?.status ?? 'absent'})`);
            continue;
          }
          const place = entry ?? { priority: j.priority, seq: Infinity };
          for (const [x, xj] of Object.entries(draft(line).jobs)) {
            if (x === event.data.jobId || xj.status !== 'parked' || !precedes(xj, place)) continue;
            contested = true;
            const xLines = linesOf(xj, line);
            if (!xLines.every((l) => hasRoom(draft(l)))) continue;
            const room = xLines.map((l) => `${l} ${draft(l).holding}/${draft(l).limit}${draft(l).paused ? ' paused' : ''}`).join(', ');
            suspects.push({ x, line, why: `${x} (priority ${xj.priority}, seq ${xj.seq} on ${line}) was parked ahead of ${event.data.jobId} (priority ${place.priority}, seq ${place.seq}) with room in every line: ${room}` });
          }
        }
        into.checked += 1;
        if (event.type === 'JobPromoted') into.promotions += 1;
        if (contested) into.contested += 1;
        candidates.push({ at, stream, jobId: event.data.jobId, suspects });
      }
    }
    apply(draft(stream), event);
  });
  for (const { stream, jobId, suspects } of candidates) {
    for (const { x, line, why } of suspects) {
      const home = afterOf(line).jobs[x]?.home ?? line;
      // A job promoted later in the same decision was not passed over.
      if (afterOf(home).jobs[x]?.status !== 'parked') {
        into.sameDecision += 1;
        continue;
      }
      into.violations.push(`${jobId} took its slots at ${stream}, yet ${why}; ${x} is still parked after the decision`);
    }
  }
  return into;
};

// ---------------------------------------------------------------------------------------------
// Random command sequences (the model of stacked-model.ts, with a busier mix of its own), every
// decision decided with its event order recorded.

const SEED = Number(process.env.FAIRNESS_SEED ?? 20_261_201);
const NUM_RUNS = Number(process.env.FAIRNESS_RUNS ?? 100);
const TS = Date.UTC(2030, 0, 1);

/** As limits-invariants generates them: every command, every path. */
const anyScenarioArb: fc.Arbitrary<Scenario> = scenarioArb(40);

/**
 * Contention: small limits, jobs due at once and mostly under several limits, and holders that
 * start and end (complete, fail, yield, expire) so lines are served with jobs waiting in them.
 */
const busyJobArb: fc.Arbitrary<JobIntent> = fc.record({
  reuse: fc.constant(null),
  mask: fc.oneof({ weight: 1, arbitrary: fc.constant(0) }, { weight: 6, arbitrary: fc.integer({ min: 1, max: 7 }) }),
  refs: fc.constant([{ mode: 1 as const, limit: 1 }, { mode: 1 as const, limit: 1 }, { mode: 1 as const, limit: 1 }]),
  priority: fc.integer({ min: -1, max: 1 }),
  delay: fc.constant(null),
  maxAttempts: fc.integer({ min: 1, max: 3 }),
  whenFull: fc.constant(null),
  name: fc.constant('work' as const),
});
const busyIntentArb: fc.Arbitrary<Intent> = fc.oneof(
  {
    weight: 10,
    arbitrary: withDt(
      fc.record({ kind: fc.constant('enqueue' as const), home: pickArb, jobs: fc.array(busyJobArb, { minLength: 1, maxLength: 2 }), homeLimit: fc.constant({ mode: 1 as const, limit: 1 }), ownsLimit: fc.constant(false) }),
    ),
  },
  {
    weight: 14,
    arbitrary: withDt(
      fc.record({
        kind: fc.constant('lease' as const),
        op: fc.constantFrom('Start' as const, 'Start' as const, 'Complete' as const, 'Complete' as const, 'Fail' as const, 'Yield' as const),
        pick: pickArb,
        stale: fc.constant(false),
        onGuest: fc.constant(false),
        jitter: jitterArb,
        yieldDelay: sometimes(fc.integer({ min: 1, max: 20_000 }), 30),
      }),
    ),
  },
  { weight: 2, arbitrary: fc.tuple(fc.integer({ min: 30_000, max: 90_000 }), fc.record({ kind: fc.constant('expire' as const), stream: pickArb, jitter: jitterArb })).map(([dt, rest]): Intent => ({ dt, ...rest })) },
  { weight: 2, arbitrary: withDt(fc.record({ kind: fc.constant('admitDue' as const), stream: pickArb })) },
  { weight: 1, arbitrary: withDt(fc.record({ kind: fc.constant('setLimit' as const), stream: pickArb, limit: fc.integer({ min: 1, max: 3 }) })) },
  { weight: 1, arbitrary: withDt(fc.record({ kind: fc.constant('pause' as const), stream: pickArb, wrong: fc.constant(false) })) },
  { weight: 1, arbitrary: withDt(fc.record({ kind: fc.constant('cancel' as const), pick: pickArb, onGuest: fc.constant(false) })) },
);
const busyScenarioArb: fc.Arbitrary<Scenario> = fc.record({
  homes: fc.integer({ min: 2, max: 4 }),
  limitKeys: fc.integer({ min: 2, max: 3 }),
  limits: fc.array(fc.integer({ min: 1, max: 2 }), { minLength: 3, maxLength: 3 }),
  homeLimits: fc.array(fc.integer({ min: 1, max: 2 }), { minLength: 4, maxLength: 4 }),
  intents: fc.array(busyIntentArb, { minLength: 20, maxLength: 80, size: 'max' }),
});

const mixedScenarioArb: fc.Arbitrary<Scenario> = fc.oneof({ weight: 1, arbitrary: anyScenarioArb }, { weight: 2, arbitrary: busyScenarioArb });

interface Decided {
  readonly index: number;
  readonly stream: string;
  readonly command: Command;
  readonly now: number;
  readonly followUp: boolean;
  readonly outcome: AcrossOutcome;
  readonly log: readonly { stream: string; event: KeyEvent }[];
}

const describeDecision = (d: Decided): string => {
  const o = d.outcome;
  const what =
    o.tag === 'needs'
      ? `NEEDS ${o.streams.join(', ')}`
      : E.isLeft(o.result)
        ? `refused ${o.result.left.tag}`
        : d.log.length === 0
          ? 'nothing'
          : d.log.map(({ stream, event }) => `${stream} ${event.type}(${'jobId' in event.data ? event.data.jobId : ''})`).join(', ');
  return `  #${d.index}${d.followUp ? '+' : ''} t=+${d.now - TS} ${d.stream} ${JSON.stringify(d.command)}\n      -> ${what}`;
};

/**
 * Runs a scenario, checking every decision (and its FillSlots follow-ups) as it is made; the first
 * violation throws, with the command sequence up to it.
 */
const runFairness = (scenario: Scenario, findings: Findings): void => {
  const world = stackedWorld(scenario);
  const { limitStreams } = world;
  let states: Map<string, KeyState> = new Map();
  const decided: Decided[] = [];

  const decideOne = (index: number, command: Command, stream: string, followUp: boolean, now: number): AcrossOutcome => {
    const decoded = decodeCommand(command);
    if (E.isLeft(decoded)) throw new Error(`the generator made a command the codecs refuse: ${JSON.stringify(command)}: ${decoded.left.message}`);
    const before = states;
    const { outcome, log } = decideLogged(command, stream, before, now);
    const d: Decided = { index, stream, command, now, followUp, outcome, log };
    decided.push(d);
    const found = fairnessFindings(before, log, findings);
    if (found.violations.length > 0) {
      throw new Error(`one fair order broken:\n${found.violations.join('\n')}\nlimit keys ${limitStreams.join(', ')}; sequence:\n${decided.map(describeDecision).join('\n')}`);
    }
    if (outcome.tag === 'decided' && E.isRight(outcome.result)) {
      const after = new Map(before);
      for (const [s, events] of outcome.result.right) if (events.length > 0) after.set(s, fold(stateOf(before, s), events));
      states = after;
    }
    return outcome;
  };

  driveScenario(scenario, world, TS, () => states, decideOne);
};

describe('one fair order across stacked limits: property over random command sequences', () => {
  it('no job under further limits takes its slots while a job parked ahead of it in one of its lines could have taken them', () => {
    const totals: Findings = { checked: 0, promotions: 0, contested: 0, sameDecision: 0, violations: [] };
    fc.assert(
      fc.property(mixedScenarioArb, (scenario) => {
        const findings: Findings = { checked: 0, promotions: 0, contested: 0, sameDecision: 0, violations: [] };
        runFairness(scenario, findings);
        totals.checked += findings.checked;
        totals.promotions += findings.promotions;
        totals.contested += findings.contested;
        totals.sameDecision += findings.sameDecision;
      }),
      { numRuns: NUM_RUNS, seed: SEED },
    );
    if (process.env.FAIRNESS_COUNTS) console.log(totals);
    // Not vacuous: admissions of jobs under limits were checked, many with someone waiting ahead of them.
    expect(totals.checked).toBeGreaterThan(0);
    expect(totals.contested).toBeGreaterThan(0);
  }, 30_000);

  it('the check flags a job that takes its slots ahead of one that could have taken them (it is not vacuous)', () => {
    // The regression's history, decided the old way by hand: b of h1 takes t though c waited there first.
    const history = contestedHistory();
    const now = T0 + 10 * SEC;
    const log: { stream: string; event: KeyEvent }[] = [
      { stream: H1, event: completed('a', 'a:1', now) },
      { stream: H1, event: released('a', 'a:1', 'completed', now) },
      { stream: T, event: limitReleased('a', 'a:1', 'completed', now) },
      { stream: H1, event: promoted('b', 'b:2', now, 8 * SEC) },
      { stream: T, event: limitHeld('b', H1, ['t'], 'b:2', now, 8 * SEC) },
    ];
    const findings = fairnessFindings(statesOf(history), log);
    expect(findings.checked).toBe(1);
    expect(findings.violations).toHaveLength(1);
    expect(findings.violations[0]).toMatch(/^b took its slots at key:h1, yet c .* still parked after the decision$/);
    // c blocked by a full home (h3) is a legitimate reason to pass it over.
    const blocked = { ...history, [H3]: [...history[H3]!.slice(0, 1), ...[enqueued(job('z')), acquired('z', 'z:1')], ...history[H3]!.slice(1)] };
    expect(fairnessFindings(statesOf(blocked), log).violations).toEqual([]);
    // c promoted later in the same decision (t's limit 2) is not passed over.
    const roomy = { ...history, [T]: [...history[T]!, limitSet(2, T0 + 3 * SEC)] };
    const both = [...log, { stream: H3, event: promoted('c', 'c:1', now, 9 * SEC) }, { stream: T, event: limitHeld('c', H3, ['t'], 'c:1', now, 9 * SEC) }];
    const later = fairnessFindings(statesOf(roomy), both);
    expect(later.violations).toEqual([]);
    expect(later.sameDecision).toBe(1);
  });

  it('the check flags a job yielded at shutdown that re-takes its home slot ahead of a job waiting before it there', () => {
    const a = under('a', ['t', 'u']);
    const history: Streams = {
      [H1]: [limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0 + SEC), enqueued(job('p', { priority: -1 })), parked('p')],
      [T]: [limitSet(1), limitHeld('a', H1, ['t', 'u'], 'a:1')],
      [U]: [limitSet(1), limitHeld('a', H1, ['t', 'u'], 'a:1')],
    };
    const now = T0 + 10 * SEC;
    const log: { stream: string; event: KeyEvent }[] = [
      { stream: H1, event: mk('JobYielded', { jobId: 'a', leaseId: 'a:1', attempts: 0, at: now }) },
      { stream: H1, event: released('a', 'a:1', 'yielded', now) },
      { stream: T, event: limitReleased('a', 'a:1', 'yielded', now) },
      { stream: U, event: limitReleased('a', 'a:1', 'yielded', now) },
      { stream: H1, event: parked('a', now) },
      { stream: T, event: limitWaiting('a', H1, ['t', 'u'], 0, now) },
      { stream: U, event: limitWaiting('a', H1, ['t', 'u'], 0, now) },
      { stream: H1, event: promoted('a', 'a:2', now, 0) },
      { stream: T, event: limitHeld('a', H1, ['t', 'u'], 'a:2', now) },
      { stream: U, event: limitHeld('a', H1, ['t', 'u'], 'a:2', now) },
    ];
    const findings = fairnessFindings(statesOf(history), log);
    expect(findings.violations).toHaveLength(1);
    expect(findings.violations[0]).toMatch(/^a took its slots at key:h1, yet p \(priority -1, seq 1 on key:h1\)/);
  });
});

/** The second regression's history without d (for the check's own spec). */
const contestedHistory = (): Streams => {
  const a = under('a', ['t']);
  const b = under('b', ['t']);
  const c = under('c', ['t']);
  return {
    [H1]: [limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0 + SEC), enqueued(b, T0 + 2 * SEC), parked('b', T0 + 2 * SEC)],
    [H3]: [limitSet(1), enqueued(c, T0 + SEC), parked('c', T0 + SEC)],
    [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('c', H3, ['t'], 0, T0 + SEC), limitWaiting('b', H1, ['t'], 0, T0 + 2 * SEC)],
  };
};

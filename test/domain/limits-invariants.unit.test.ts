import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import * as E from 'fp-ts/lib/Either.js';
import { describe, expect, it } from 'vitest';
import { decodeCommand, type Command } from '../../src/domain/commands.js';
import { decideAcross, decideAll, type AcrossOutcome } from '../../src/domain/decide/index.js';
import type { DomainError } from '../../src/domain/errors.js';
import { KeyEvent } from '../../src/domain/events.js';
import { KeyStateCodec, Scratch, draftOf, evolve, fold, holders, initialKeyState, type Draft, type JobState, type KeyState } from '../../src/domain/key-state.js';
import { keyStream } from '../../src/domain/streams.js';
import { driveScenario, scenarioArb, stackedWorld, stateOf, type Scenario, type States } from './stacked-model.js';

// Stacked limits over random command sequences across 2-4 home keys and 1-3 shared limit keys
// (which may also be the home of jobs of their own, under the other limit keys). Every command is
// decided with decideAll over every stream; each stream folds its own events; a decision's
// fillLater is served as FillSlots commands until none is left, as the key writer would. Beside
// the pure states, a second set of long-lived states is moved in place through decideAcross and
// Scratch (the key writer's path), and must decide and end up the same.

const T0 = Date.UTC(2030, 0, 1);
// LIMITS_RUNS / LIMITS_SEED run a longer hunt (4,500 runs over seeds 1-3 found nothing);
// LIMITS_COUNTS prints how often the generator reached each path.
const NUM_RUNS = Number(process.env.LIMITS_RUNS ?? 120);
const SEED = Number(process.env.LIMITS_SEED ?? 20_261_130);
const TIMEOUT_MS = 30_000;

// ---------------------------------------------------------------------------------------------
// Running a scenario

interface Decided {
  readonly stream: string;
  readonly command: Command;
  readonly now: number;
  /** A FillSlots a decision's fillLater asked for. */
  readonly followUp: boolean;
  readonly outcome: AcrossOutcome;
  readonly before: States;
  /** The input states rendered before deciding, and again after (decideAll must not change them). */
  readonly inputBefore: string;
  readonly inputAfter: string;
  readonly after: States;
  /** Events written per stream (empty for a refusal). */
  readonly written: ReadonlyMap<string, readonly KeyEvent[]>;
  /** What the key writer's path (decideAcross on long-lived states, in place) decided, and how it left its states. */
  readonly inPlace: { readonly sameOutcome: boolean; readonly sameStates: string | null };
}

interface Step {
  readonly index: number;
  readonly now: number;
  /** The command and its follow-ups (FillSlots), in order. */
  readonly decisions: readonly Decided[];
  readonly after: States;
}

interface Trace {
  readonly scenario: Scenario;
  readonly streams: readonly string[];
  readonly limitStreams: readonly string[];
  readonly steps: readonly Step[];
  readonly histories: ReadonlyMap<string, readonly KeyEvent[]>;
  readonly final: States;
  readonly live: ReadonlyMap<string, Draft>;
}

const canonical = (value: unknown): string =>
  JSON.stringify(value, (_k, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0))) : v,
  );

const render = (states: States): string => canonical([...states].sort(([x], [y]) => (x < y ? -1 : 1)));

const describeCommand = (c: Command): string => JSON.stringify(c);
const describeOutcome = (o: AcrossOutcome): string => {
  if (o.tag === 'needs') return `NEEDS ${o.streams.join(', ')}`;
  if (E.isLeft(o.result)) return `refused ${JSON.stringify(o.result.left)}`;
  const parts = [...o.result.right].filter(([, es]) => es.length > 0).map(([s, es]) => `${s}: ${es.map((e) => `${e.type}(${'jobId' in e.data ? e.data.jobId : ''})`).join(' ')}`);
  return parts.length === 0 ? 'nothing' : parts.join(' | ');
};

const describeTrace = (trace: Trace, upTo: number): string =>
  trace.steps
    .slice(0, upTo + 1)
    .flatMap((step) => step.decisions.map((d) => `  #${step.index}${d.followUp ? '+' : ''} t=+${d.now - T0} ${d.stream} ${describeCommand(d.command)}\n      -> ${describeOutcome(d.outcome)}`))
    .join('\n');

const violation = (trace: Trace, step: Step, what: string): never => {
  throw new Error(`${what}\nat step #${step.index}; limit keys ${trace.limitStreams.join(', ')}; sequence:\n${describeTrace(trace, step.index)}`);
};

const isHome = (job: JobState): boolean => job.home === undefined;

const runScenario = (scenario: Scenario): Trace => {
  const world = stackedWorld(scenario);
  const { streams, limitStreams } = world;
  let states = new Map<string, KeyState>();
  const histories = new Map<string, KeyEvent[]>();
  const live = new Map<string, Draft>();
  const steps: Step[] = [];
  let decisions: Decided[] = [];
  const trace: Trace = { scenario, streams, limitStreams, steps, histories, final: states, live };

  const decideOne = (_index: number, command: Command, stream: string, followUp: boolean, now: number): AcrossOutcome => {
    const decoded = decodeCommand(command);
    if (E.isLeft(decoded)) throw new Error(`the generator made a command the codecs refuse: ${JSON.stringify(command)}: ${decoded.left.message}`);
    const before = states;
    const inputBefore = render(before);
    const outcome = decideAll(command, stream, before, now);
    const inputAfter = render(before);
    // The key writer's path: decideAcross on long-lived states, changed in place.
    const placeOutcome = decideAcross(
      command,
      stream,
      (s) => {
        let d = live.get(s);
        if (d === undefined) live.set(s, (d = draftOf(initialKeyState)));
        return new Scratch(d);
      },
      now,
    );
    const written = new Map<string, readonly KeyEvent[]>();
    let after: Map<string, KeyState> = before;
    if (outcome.tag === 'decided' && E.isRight(outcome.result)) {
      after = new Map(before);
      for (const [s, events] of outcome.result.right) {
        if (events.length === 0) continue;
        written.set(s, events);
        after.set(s, fold(stateOf(before, s), events));
        histories.set(s, [...(histories.get(s) ?? []), ...events]);
      }
    }
    states = after;
    const liveStates = new Map([...live].filter(([s, d]) => after.has(s) || canonical(d) !== canonical(initialKeyState)));
    const liveRendered = render(liveStates);
    const pureRendered = render(new Map([...after].filter(([s]) => liveStates.has(s) || canonical(stateOf(after, s)) !== canonical(initialKeyState))));
    decisions.push({
      stream,
      command,
      now,
      followUp,
      outcome,
      before,
      inputBefore,
      inputAfter,
      after,
      written,
      inPlace: { sameOutcome: isDeepStrictEqual(placeOutcome, outcome), sameStates: liveRendered === pureRendered ? null : `in place: ${liveRendered}\npure:     ${pureRendered}` },
    });
    return outcome;
  };

  driveScenario(scenario, world, T0, () => states, decideOne, (index, now) => {
    steps.push({ index, now, decisions, after: states });
    decisions = [];
  });
  return { ...trace, final: states };
};

// ---------------------------------------------------------------------------------------------
// The properties

const check = (property: (trace: Trace) => void, numRuns = NUM_RUNS): void =>
  fc.assert(
    fc.property(scenarioArb(), (scenario) => property(runScenario(scenario))),
    { numRuns, seed: SEED },
  );

const isAdmission = (e: KeyEvent): boolean => e.type === 'SlotAcquired' || e.type === 'JobPromoted' || e.type === 'LimitHeld';
const jobOf = (e: KeyEvent): string => ('jobId' in e.data ? e.data.jobId : '');

/** Every decision decideAll makes is decided (never 'needs': every stream is given) and asks for no follow-up. */
const decisionsNeedNothing = (trace: Trace): void => {
  for (const step of trace.steps) {
    for (const d of step.decisions) {
      if (d.outcome.tag === 'needs') violation(trace, step, `decideAll needed streams ${d.outcome.streams.join(', ')}`);
      else if (d.outcome.fillLater.size > 0) violation(trace, step, `decideAll asked to serve later: ${JSON.stringify([...d.outcome.fillLater])}`);
    }
  }
};

/** (a) no key has more holders (guests counted) than its limit after an admission; a paused key admits no one. */
const holdersWithinLimit = (trace: Trace): void => {
  for (const step of trace.steps) {
    for (const d of step.decisions) {
      for (const [s, events] of d.written) {
        let state = stateOf(d.before, s);
        for (const event of events) {
          const was = state;
          state = evolve(state, event);
          if (!isAdmission(event)) continue;
          const n = holders(state).length;
          if (n > state.limit) violation(trace, step, `(a) ${s}: ${event.type}(${jobOf(event)}) left ${n} holders on a limit of ${state.limit}`);
          if (was.paused !== undefined) violation(trace, step, `(a) ${s} is paused, yet ${event.type}(${jobOf(event)})`);
        }
        if (state.holding !== holders(state).length) violation(trace, step, `(a) ${s}: holding counter ${state.holding}, holders ${holders(state).length}`);
      }
    }
  }
};

/** (b) no partial hold: a job holds (under one lease) or waits on its home and on each of its limits alike, or on none of them. */
const noPartialHold = (trace: Trace): void => {
  for (const step of trace.steps) {
    for (const d of step.decisions) {
      const states = d.after;
      for (const s of trace.streams) {
        for (const [jobId, job] of Object.entries(stateOf(states, s).jobs)) {
          if (isHome(job)) {
            for (const limit of job.limits ?? []) {
              const guest = stateOf(states, keyStream(limit)).jobs[jobId];
              const where = `${jobId} (home ${s}, ${job.status}${job.lease ? ` ${job.lease.leaseId}` : ''}) on its limit ${limit}`;
              if (job.status === 'holding' || job.status === 'parked') {
                if (guest === undefined) violation(trace, step, `(b) partial hold: ${where} is absent`);
                if (guest!.home !== s) violation(trace, step, `(b) ${where} names home ${guest!.home}`);
                if (guest!.status !== job.status) violation(trace, step, `(b) partial hold: ${where} is ${guest!.status}`);
                if (guest!.lease?.leaseId !== job.lease?.leaseId) violation(trace, step, `(b) ${where} holds lease ${guest!.lease?.leaseId}`);
                if (guest!.priority !== job.priority || !isDeepStrictEqual(guest!.limits, job.limits)) violation(trace, step, `(b) ${where} has priority ${guest!.priority} and limits ${guest!.limits}`);
              } else if (guest !== undefined) {
                violation(trace, step, `(b) ${where} is still there (${guest.status})`);
              }
            }
          } else {
            const home = stateOf(states, job.home!).jobs[jobId];
            const where = `guest ${jobId} on ${s} (${job.status}${job.lease ? ` ${job.lease.leaseId}` : ''}, home ${job.home})`;
            if (home === undefined || !isHome(home)) violation(trace, step, `(b) ${where}: its home has no such job`);
            if (!(home!.limits ?? []).map(keyStream).includes(s)) violation(trace, step, `(b) ${where}: the job at home is not under ${s}`);
            if (home!.status !== job.status || home!.lease?.leaseId !== job.lease?.leaseId) {
              violation(trace, step, `(b) partial hold: ${where}, at home ${home!.status}${home!.lease ? ` ${home!.lease.leaseId}` : ''}`);
            }
          }
        }
      }
    }
  }
};

/** A key has room: a free slot, and not paused. */
const hasRoom = (states: States, s: string): boolean => {
  const st = stateOf(states, s);
  return st.paused === undefined && st.holding < st.limit;
};

/** (c) at quiescence no parked job (home or guest) has room on every one of its streams. */
const noIdleRoomAtQuiescence = (trace: Trace): void => {
  for (const step of trace.steps) {
    for (const s of trace.streams) {
      for (const [jobId, job] of Object.entries(stateOf(step.after, s).jobs)) {
        if (job.status !== 'parked') continue;
        const all = [job.home ?? s, ...(job.limits ?? []).map(keyStream)];
        if (all.every((x) => hasRoom(step.after, x))) {
          const room = all.map((x) => `${x} ${stateOf(step.after, x).holding}/${stateOf(step.after, x).limit}`).join(', ');
          violation(trace, step, `(c) ${jobId} waits on ${s}${job.home ? ` (guest of ${job.home})` : ''} though every stream of it has room: ${room}`);
        }
      }
    }
  }
};

/** (d) folding each stream's history from scratch (live, or JSON-stored) gives the incremental state, and the in-place path agrees. */
const replayDeterminism = (trace: Trace): void => {
  const last = trace.steps[trace.steps.length - 1];
  if (last === undefined) return;
  for (const step of trace.steps) {
    for (const d of step.decisions) {
      if (!d.inPlace.sameOutcome) violation(trace, step, `(d) decideAcross on the in-place states decided otherwise than decideAll (${d.command.type} on ${d.stream})`);
      if (d.inPlace.sameStates !== null) violation(trace, step, `(d) the in-place states differ from the folded ones after ${d.command.type} on ${d.stream}:\n${d.inPlace.sameStates}`);
    }
  }
  for (const s of trace.streams) {
    const history = trace.histories.get(s) ?? [];
    const incremental = stateOf(trace.final, s);
    if (canonical(fold(initialKeyState, history)) !== canonical(incremental)) violation(trace, last, `(d) ${s}: folding its history from scratch differs from the incremental state`);
    const stored = JSON.parse(JSON.stringify(history)) as KeyEvent[];
    stored.forEach((e, i) => {
      if (E.isLeft(KeyEvent.decode(e))) violation(trace, last, `(d) ${s}: stored event #${i} (${e.type}) does not decode`);
    });
    if (canonical(fold(initialKeyState, stored)) !== canonical(incremental)) violation(trace, last, `(d) ${s}: folding its JSON-stored history differs from the incremental state`);
    const snapshot = KeyStateCodec.decode(JSON.parse(JSON.stringify(incremental)));
    if (E.isLeft(snapshot) || canonical(snapshot.right) !== canonical(incremental)) violation(trace, last, `(d) ${s}: the state does not survive a JSON snapshot`);
  }
};

/** (e) a refused command writes nothing on any stream, and no decision changes the states it was given. */
const refusalWritesNothing = (trace: Trace): void => {
  for (const step of trace.steps) {
    for (const d of step.decisions) {
      if (d.inputBefore !== d.inputAfter) violation(trace, step, `(e) decideAll changed the states it was given (${d.command.type} on ${d.stream})`);
      if (d.outcome.tag === 'decided' && E.isLeft(d.outcome.result)) {
        if (d.written.size > 0 || d.after !== d.before) violation(trace, step, `(e) a refusal wrote ${[...d.written.keys()].join(', ')}`);
        if (d.outcome.fillLater.size > 0) violation(trace, step, '(e) a refusal asked for a follow-up');
        if (d.inPlace.sameStates !== null) violation(trace, step, `(e) a refusal left the in-place states changed:\n${d.inPlace.sameStates}`);
      }
    }
  }
};

/** The refusals the generator provokes are the ones a reader would expect (and only those). */
const refusesWhatItMust = (trace: Trace): void => {
  for (const step of trace.steps) {
    for (const d of step.decisions) {
      if (d.outcome.tag !== 'decided') continue;
      const c = d.command;
      const before = stateOf(d.before, d.stream);
      const target = 'jobId' in c && c.jobId !== undefined ? before.jobs[c.jobId] : undefined;
      const got: DomainError | null = E.isLeft(d.outcome.result) ? d.outcome.result.left : null;
      if (target !== undefined && target.home !== undefined && c.type !== 'Enqueue' && c.type !== 'EnqueueMany') {
        if (got?.tag !== 'HeldElsewhere') violation(trace, step, `${c.type} naming guest ${target && 'jobId' in c ? c.jobId : ''} on ${d.stream} should be refused as HeldElsewhere, got ${got?.tag ?? 'accepted'}`);
      }
      if (got?.tag === 'LimitMismatch' && got.key !== undefined) {
        // (A key new before the batch got its limit from an earlier job of it.)
        const recorded = stateOf(d.before, keyStream(got.key)).limit;
        if (recorded > 0 && recorded !== got.recorded) violation(trace, step, `LimitMismatch names ${got.key} with limit ${got.recorded}, recorded ${recorded}`);
      }
    }
  }
};

describe('stacked limits: invariants over random command sequences across home and limit keys', () => {
  it('decideAll never needs another stream, and never asks for a follow-up FillSlots', () => {
    check(decisionsNeedNothing);
  }, TIMEOUT_MS);

  it('(a) no key (guests counted) has more holders than its limit after an admission; a paused key admits no one', () => {
    check(holdersWithinLimit);
  }, TIMEOUT_MS);

  it('(b) no partial hold: home and every limit hold under the same lease, or wait in every line, or neither', () => {
    check(noPartialHold);
  }, TIMEOUT_MS);

  it('(c) at quiescence no parked job (home or guest) has room in every one of its keys', () => {
    check(noIdleRoomAtQuiescence);
  }, TIMEOUT_MS);

  it("(d) replay: folding each stream's history from scratch (and from JSON) equals the incremental state, and the in-place path agrees", () => {
    check(replayDeterminism);
  }, TIMEOUT_MS);

  it('(e) a refused command writes nothing on any stream; no decision changes the states it is given', () => {
    check(refusalWritesNothing);
  }, TIMEOUT_MS);

  it('operator commands naming a guest on a limit key are refused as HeldElsewhere; LimitMismatch names the recorded limit', () => {
    check(refusesWhatItMust);
  }, TIMEOUT_MS);

  it('the generator reaches the paths the properties speak of', () => {
    const counts = new Map<string, number>();
    const count = (what: string, yes: boolean) => yes && counts.set(what, (counts.get(what) ?? 0) + 1);
    for (const scenario of fc.sample(scenarioArb(), { numRuns: 150, seed: SEED })) {
      const trace = runScenario(scenario);
      for (const step of trace.steps) {
        for (const d of step.decisions) {
          const types = [...d.written.values()].flat().map((e) => e.type);
          const has = (t: string) => types.includes(t as KeyEvent['type']);
          const tag = d.outcome.tag === 'decided' && E.isLeft(d.outcome.result) ? d.outcome.result.left.tag : null;
          const c = d.command.type;
          count('admitted under limits', has('LimitHeld') && has('SlotAcquired'));
          count('parked under limits', has('LimitWaiting'));
          count('guest promoted after a release', (c === 'Complete' || c === 'Fail' || c === 'ExpireLeases' || c === 'Yield') && [...d.written].some(([s, es]) => s !== d.stream && es.some((e) => e.type === 'JobPromoted')));
          count('released on limits', has('LimitReleased'));
          count('left a line', has('LimitLeft'));
          count('promoted on resume of a limit key', c === 'ResumeKey' && has('LimitHeld'));
          count('promoted on a raised limit', c === 'SetLimit' && has('LimitHeld'));
          count('LimitMismatch on a limit key', tag === 'LimitMismatch' && d.outcome.tag === 'decided' && E.isLeft(d.outcome.result) && d.outcome.result.left.tag === 'LimitMismatch' && d.outcome.result.left.key !== undefined);
          count('HeldElsewhere', tag === 'HeldElsewhere');
          count('expired under limits', has('LeaseExpired') && has('LimitReleased'));
          count('rejected under limits', has('JobRejected') && [...d.before.values()].some(() => true));
          count('holders above a lowered limit', [...d.after.values()].some((s) => holders(s).length > s.limit && s.limit > 0));
          count('a guest parked with room on its limit key', trace.limitStreams.some((s) => Object.values(stateOf(d.after, s).jobs).some((j) => j.home !== undefined && j.status === 'parked') && hasRoom(d.after, s)));
        }
      }
    }
    const wanted = [
      'admitted under limits', 'parked under limits', 'guest promoted after a release', 'released on limits', 'left a line', 'promoted on resume of a limit key',
      'promoted on a raised limit', 'LimitMismatch on a limit key', 'HeldElsewhere', 'expired under limits', 'rejected under limits', 'holders above a lowered limit',
      'a guest parked with room on its limit key',
    ];
    if (process.env.LIMITS_COUNTS) console.log(counts);
    expect(wanted.filter((w) => (counts.get(w) ?? 0) < 3)).toEqual([]);
  }, TIMEOUT_MS);
});

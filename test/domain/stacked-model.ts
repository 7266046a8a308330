import fc from 'fast-check';
import type { Command, JobSpec, LimitRef } from '../../src/domain/commands.js';
import type { AcrossOutcome, FillLater } from '../../src/domain/decide/index.js';
import { holders, initialKeyState, type JobState, type KeyState } from '../../src/domain/key-state.js';
import { keyStream } from '../../src/domain/streams.js';

// The stacked-limits model shared by the invariants (limits-invariants.unit.test.ts) and the
// fairness property (limits-fairness.unit.test.ts): 2-4 home keys and 1-3 shared limit keys
// (which may also be the home of jobs of their own, under the other limit keys); intents drawn by
// fast-check and interpreted against the current states (so most commands hit real jobs); and
// the driver that decides each intent's command, then the FillSlots its decisions ask for.

// ---------------------------------------------------------------------------------------------
// Scenarios

/** Which of the candidates at hand: taken modulo their number. */
export type Choice = number;
/** A limit named: no limit (0), the one the scenario uses for the key (1), or `limit` (2). */
export type Ref = { readonly mode: 0 | 1 | 2; readonly limit: number };

export interface JobIntent {
  readonly reuse: Choice | null;
  /** Bits over the limit keys: the job is under those (its home excluded). */
  readonly mask: number;
  /** Per limit key, how the job names it. */
  readonly refs: readonly Ref[];
  readonly priority: number;
  readonly delay: number | null;
  readonly maxAttempts: number;
  readonly whenFull: 'park' | 'reject' | 'replace' | null;
  readonly name: 'work' | 'report';
}

export type Intent = { readonly dt: number } & (
  | { readonly kind: 'enqueue'; readonly home: Choice; readonly jobs: readonly JobIntent[]; readonly homeLimit: Ref; readonly ownsLimit: boolean }
  | { readonly kind: 'lease'; readonly op: 'Start' | 'Renew' | 'Complete' | 'Fail' | 'Yield'; readonly pick: Choice; readonly stale: boolean; readonly onGuest: boolean; readonly jitter: number; readonly yieldDelay: number | null }
  | { readonly kind: 'expire'; readonly stream: Choice; readonly jitter: number }
  | { readonly kind: 'admitDue'; readonly stream: Choice }
  | { readonly kind: 'cancel'; readonly pick: Choice; readonly onGuest: boolean }
  | { readonly kind: 'discard'; readonly stream: Choice; readonly mask: number | null; readonly guest: boolean }
  | { readonly kind: 'revoke'; readonly stream: Choice; readonly pick: Choice | null; readonly jitter: number }
  | { readonly kind: 'setLimit'; readonly stream: Choice; readonly limit: number }
  | { readonly kind: 'pause'; readonly stream: Choice; readonly wrong: boolean }
  | { readonly kind: 'fill'; readonly stream: Choice }
);

export interface Scenario {
  readonly homes: number;
  readonly limitKeys: number;
  /** The limit each limit key is usually named with. */
  readonly limits: readonly number[];
  /** The limit each home key is usually enqueued with. */
  readonly homeLimits: readonly number[];
  readonly intents: readonly Intent[];
}

export const pickArb = fc.nat({ max: 1_000 });
export const sometimes = <T>(arb: fc.Arbitrary<T>, percent: number): fc.Arbitrary<T | null> =>
  fc.oneof({ weight: 100 - percent, arbitrary: fc.constant(null) }, { weight: percent, arbitrary: arb });
export const jitterArb = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true });
export const dtArb = fc.oneof(
  { weight: 5, arbitrary: fc.constant(0) },
  { weight: 4, arbitrary: fc.integer({ min: 1, max: 3_000 }) },
  { weight: 2, arbitrary: fc.integer({ min: 3_000, max: 40_000 }) },
  { weight: 1, arbitrary: fc.integer({ min: 40_000, max: 3_600_000 }) },
);

export const refArb: fc.Arbitrary<Ref> = fc.record({ mode: fc.constantFrom(0 as const, 1 as const, 1 as const, 1 as const, 1 as const, 2 as const), limit: fc.integer({ min: 1, max: 3 }) });

export const jobIntentArb: fc.Arbitrary<JobIntent> = fc.record({
  reuse: sometimes(pickArb, 10),
  mask: fc.oneof({ weight: 1, arbitrary: fc.constant(0) }, { weight: 5, arbitrary: fc.integer({ min: 1, max: 7 }) }),
  refs: fc.array(refArb, { minLength: 3, maxLength: 3 }),
  priority: fc.integer({ min: -1, max: 2 }),
  delay: sometimes(fc.integer({ min: -1_000, max: 15_000 }), 20),
  maxAttempts: fc.integer({ min: 1, max: 3 }),
  whenFull: sometimes(fc.constantFrom('park' as const, 'reject' as const, 'replace' as const), 25),
  name: fc.constantFrom('work' as const, 'report' as const),
});

export const withDt = <T extends object>(arb: fc.Arbitrary<T>): fc.Arbitrary<Intent> =>
  fc.tuple(dtArb, arb).map(([dt, rest]) => ({ dt, ...rest }) as unknown as Intent);

export const intentArb: fc.Arbitrary<Intent> = fc.oneof(
  {
    weight: 14,
    arbitrary: withDt(
      fc.record({
        kind: fc.constant('enqueue' as const),
        home: pickArb,
        jobs: fc.oneof({ weight: 6, arbitrary: fc.array(jobIntentArb, { minLength: 1, maxLength: 1 }) }, { weight: 1, arbitrary: fc.array(jobIntentArb, { minLength: 2, maxLength: 3 }) }),
        homeLimit: refArb,
        ownsLimit: fc.oneof({ weight: 4, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
      }),
    ),
  },
  {
    weight: 16,
    arbitrary: withDt(
      fc.record({
        kind: fc.constant('lease' as const),
        op: fc.constantFrom('Start' as const, 'Start' as const, 'Renew' as const, 'Complete' as const, 'Complete' as const, 'Fail' as const, 'Yield' as const),
        pick: pickArb,
        stale: fc.oneof({ weight: 9, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
        onGuest: fc.oneof({ weight: 12, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }),
        jitter: jitterArb,
        yieldDelay: sometimes(fc.integer({ min: 1, max: 20_000 }), 40),
      }),
    ),
  },
  // The sweeper mostly runs after a while, past leases (30 s by default).
  {
    weight: 5,
    arbitrary: fc
      .tuple(fc.oneof(dtArb, fc.integer({ min: 30_000, max: 90_000 })), fc.record({ kind: fc.constant('expire' as const), stream: pickArb, jitter: jitterArb }))
      .map(([dt, rest]): Intent => ({ dt, ...rest })),
  },
  { weight: 2, arbitrary: withDt(fc.record({ kind: fc.constant('admitDue' as const), stream: pickArb })) },
  { weight: 2, arbitrary: withDt(fc.record({ kind: fc.constant('cancel' as const), pick: pickArb, onGuest: fc.oneof({ weight: 6, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }) })) },
  { weight: 2, arbitrary: withDt(fc.record({ kind: fc.constant('discard' as const), stream: pickArb, mask: sometimes(fc.nat({ max: 15 }), 60), guest: fc.oneof({ weight: 6, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }) })) },
  { weight: 1, arbitrary: withDt(fc.record({ kind: fc.constant('revoke' as const), stream: pickArb, pick: sometimes(pickArb, 60), jitter: jitterArb })) },
  { weight: 3, arbitrary: withDt(fc.record({ kind: fc.constant('setLimit' as const), stream: pickArb, limit: fc.integer({ min: 1, max: 4 }) })) },
  { weight: 3, arbitrary: withDt(fc.record({ kind: fc.constant('pause' as const), stream: pickArb, wrong: fc.oneof({ weight: 8, arbitrary: fc.constant(false) }, { weight: 1, arbitrary: fc.constant(true) }) })) },
  { weight: 1, arbitrary: withDt(fc.record({ kind: fc.constant('fill' as const), stream: pickArb })) },
);

export const scenarioArb = (maxLength = 40): fc.Arbitrary<Scenario> =>
  fc.record({
    homes: fc.integer({ min: 2, max: 4 }),
    limitKeys: fc.integer({ min: 1, max: 3 }),
    limits: fc.array(fc.integer({ min: 1, max: 3 }), { minLength: 3, maxLength: 3 }),
    homeLimits: fc.array(fc.integer({ min: 1, max: 4 }), { minLength: 4, maxLength: 4 }),
    intents: fc.array(intentArb, { minLength: 1, maxLength: maxLength, size: 'max' }),
  });

// ---------------------------------------------------------------------------------------------
// The world of a scenario, and its driver

export type States = ReadonlyMap<string, KeyState>;

export const stateOf = (states: States, s: string): KeyState => states.get(s) ?? initialKeyState;

const isHome = (job: JobState): boolean => job.home === undefined;

export interface StackedWorld {
  readonly homeStreams: readonly string[];
  readonly limitKeys: readonly string[];
  readonly limitStreams: readonly string[];
  readonly streams: readonly string[];
  /** The command an intent stands for on `states` at `now`; undefined when it finds nothing to act on. */
  commandFor(intent: Intent, states: States, now: number): { readonly command: Command; readonly stream: string } | undefined;
}

export const stackedWorld = (scenario: Scenario): StackedWorld => {
  const homeStreams = Array.from({ length: scenario.homes }, (_, i) => keyStream(`h${i}`));
  const limitKeys = Array.from({ length: scenario.limitKeys }, (_, i) => `t${i}`);
  const limitStreams = limitKeys.map(keyStream);
  const streams = [...homeStreams, ...limitStreams];
  // Homes mostly; a limit key is sometimes the home of jobs of its own.
  const homeChoices = [...homeStreams, ...homeStreams, ...homeStreams, ...limitStreams];
  // Operators act on limit keys more often than not.
  const opChoices = [...streams, ...limitStreams];
  const jobHome = new Map<string, string>();
  let nextJob = 0;

  const commandFor = (intent: Intent, states: States, now: number): { readonly command: Command; readonly stream: string } | undefined => {
    /** Every job entry at its home: [stream, jobId, job]. */
    const homeJobs = (): [string, string, JobState][] =>
      streams.flatMap((s) => Object.entries(stateOf(states, s).jobs).filter(([, j]) => isHome(j)).map(([id, j]) => [s, id, j] as [string, string, JobState]));
    const guestsOf = (jobId: string): string[] => streams.filter((s) => stateOf(states, s).jobs[jobId]?.home !== undefined);
    const pick = <T>(xs: readonly T[], n: number): T | undefined => (xs.length === 0 ? undefined : xs[n % xs.length]);
    switch (intent.kind) {
      case 'enqueue': {
        const home = pick(homeChoices, intent.home)!;
        const jobs: JobSpec[] = intent.jobs.map((j) => {
          const reusable = [...jobHome].filter(([, h]) => h === home).map(([id]) => id);
          const jobId = j.reuse !== null && reusable.length > 0 ? pick(reusable, j.reuse)! : `j${nextJob++}`;
          jobHome.set(jobId, home);
          const limits: LimitRef[] = [];
          limitKeys.forEach((key, i) => {
            if ((j.mask & (1 << i)) === 0 || keyStream(key) === home) return;
            const ref = j.refs[i]!;
            limits.push(ref.mode === 0 ? { key } : { key, limit: ref.mode === 1 ? scenario.limits[i]! : ref.limit });
          });
          return {
            jobId,
            name: j.name,
            args: {},
            queue: 'default',
            priority: j.priority,
            maxAttempts: j.maxAttempts,
            runAt: j.delay === null ? null : now + j.delay,
            ...(j.whenFull === null ? {} : { whenFull: j.whenFull }),
            ...(limits.length === 0 ? {} : { limits }),
          };
        });
        const homeLimit = intent.homeLimit.mode === 0 ? undefined : intent.homeLimit.mode === 2 ? intent.homeLimit.limit : homeStreams.includes(home) ? scenario.homeLimits[homeStreams.indexOf(home)]! : scenario.limits[limitStreams.indexOf(home)]!;
        const policy = { ...(homeLimit === undefined ? {} : { limit: homeLimit }), ...(intent.ownsLimit ? { ownsLimit: true as const } : {}) };
        const command: Command = jobs.length === 1 ? { type: 'Enqueue', job: jobs[0]!, ...policy } : { type: 'EnqueueMany', jobs, ...policy };
        return { command, stream: home };
      }
      case 'lease': {
        const holdingJobs = homeJobs().filter(([, , j]) => j.lease !== null);
        const wanted = holdingJobs.filter(([, , j]) => (intent.op === 'Start' ? j.lease!.workerId === null : intent.op === 'Renew' || intent.op === 'Yield' ? true : j.lease!.workerId !== null));
        const chosen = pick(wanted.length > 0 ? wanted : holdingJobs, intent.pick);
        if (chosen === undefined) return undefined;
        const [home, jobId, j] = chosen;
        const leaseId = intent.stale ? `${jobId}:${j.lease!.leaseId === `${jobId}:1` ? 2 : 1}` : j.lease!.leaseId;
        const stream = intent.onGuest ? (pick(guestsOf(jobId), intent.pick) ?? home) : home;
        switch (intent.op) {
          case 'Start':
            return { stream, command: { type: 'Start', jobId, leaseId, workerId: 'w1' } };
          case 'Renew':
            return { stream, command: { type: 'Renew', jobId, leaseId } };
          case 'Complete':
            return { stream, command: { type: 'Complete', jobId, leaseId } };
          case 'Fail':
            return { stream, command: { type: 'Fail', jobId, leaseId, error: 'boom', jitter: intent.jitter } };
          case 'Yield':
            return { stream, command: { type: 'Yield', jobId, leaseId, ...(intent.yieldDelay === null ? {} : { delayMs: intent.yieldDelay }) } };
        }
        return undefined;
      }
      case 'expire':
        return { stream: pick(homeChoices, intent.stream)!, command: { type: 'ExpireLeases', jitter: intent.jitter } };
      case 'admitDue':
        return { stream: pick(streams, intent.stream)!, command: { type: 'AdmitDue' } };
      case 'cancel': {
        const chosen = pick(homeJobs(), intent.pick);
        if (chosen === undefined) return undefined;
        const [home, jobId] = chosen;
        const stream = intent.onGuest ? (pick(guestsOf(jobId), intent.pick) ?? home) : home;
        return { stream, command: { type: 'Cancel', jobId, by: 'op' } };
      }
      case 'discard': {
        const stream = pick(opChoices, intent.stream)!;
        const st = stateOf(states, stream);
        const parkedHere = Object.entries(st.jobs).filter(([, j]) => j.status === 'parked' && isHome(j)).map(([id]) => id);
        const guests = Object.entries(st.jobs).filter(([, j]) => !isHome(j)).map(([id]) => id);
        if (intent.guest && guests.length > 0) return { stream, command: { type: 'DiscardParked', by: 'op', jobIds: [pick(guests, intent.stream)!] } };
        if (intent.mask === null) return { stream, command: { type: 'DiscardParked', by: 'op' } };
        const jobIds = parkedHere.filter((_, i) => (intent.mask! & (1 << i % 4)) !== 0);
        return { stream, command: { type: 'DiscardParked', by: 'op', jobIds } };
      }
      case 'revoke': {
        const stream = pick(opChoices, intent.stream)!;
        if (intent.pick === null) return { stream, command: { type: 'RevokeLease', by: 'op', jitter: intent.jitter } };
        const held = holders(stateOf(states, stream));
        const chosen = pick(held, intent.pick);
        return { stream, command: { type: 'RevokeLease', by: 'op', jitter: intent.jitter, ...(chosen === undefined ? {} : { jobId: chosen.jobId }) } };
      }
      case 'setLimit':
        return { stream: pick(opChoices, intent.stream)!, command: { type: 'SetLimit', limit: intent.limit, by: 'op' } };
      case 'pause': {
        const stream = pick(opChoices, intent.stream)!;
        const isPaused = stateOf(states, stream).paused !== undefined;
        return { stream, command: isPaused !== intent.wrong ? { type: 'ResumeKey', by: 'op' } : { type: 'PauseKey', by: 'op' } };
      }
      case 'fill':
        return { stream: pick(streams, intent.stream)!, command: { type: 'FillSlots' } };
    }
  };
  return { homeStreams, limitKeys, limitStreams, streams, commandFor };
};

/**
 * Runs a scenario's intents: at each, its command (when it stands for one), then every FillSlots
 * the decisions ask for (fillLater), as the key writer writes them after a flush. `decide` decides
 * and keeps the states; `stepped` is told when an intent and its follow-ups are done.
 */
export const driveScenario = (
  scenario: Scenario,
  world: StackedWorld,
  t0: number,
  states: () => States,
  decide: (index: number, command: Command, stream: string, followUp: boolean, now: number) => AcrossOutcome,
  stepped: (index: number, now: number) => void = () => undefined,
): void => {
  let now = t0;
  scenario.intents.forEach((intent, index) => {
    now += intent.dt;
    const chosen = world.commandFor(intent, states(), now);
    if (chosen !== undefined) {
      const pending: [string, FillLater][] = [];
      const serve = (o: AcrossOutcome) => {
        if (o.tag === 'decided') pending.push(...o.fillLater);
      };
      serve(decide(index, chosen.command, chosen.stream, false, now));
      for (let rounds = 0; pending.length > 0; rounds++) {
        if (rounds > 50) throw new Error('fillLater never ran dry');
        const [s, { after }] = pending.shift()!;
        serve(decide(index, { type: 'FillSlots', ...(after === undefined ? {} : { after: { priority: after.priority, seq: after.seq } }) }, s, true, now));
      }
    }
    stepped(index, now);
  });
};

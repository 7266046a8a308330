import fc from 'fast-check';
import * as E from 'fp-ts/lib/Either.js';
import { decodeCommand, type Command } from '../../src/domain/commands.js';
import { decide as domainDecide } from '../../src/domain/decide/index.js';
import type { DomainError } from '../../src/domain/errors.js';
import type { KeyEvent } from '../../src/domain/events.js';
import { fold, holders, jobsIn, type JobEntry, type KeyState, initialKeyState } from '../../src/domain/key-state.js';

// Random command sequences for one key. The generator draws "intents" (what kind of command, which
// job by position, stale or not, how far the clock moves first); the interpreter turns each intent
// into a concrete command against the key's CURRENT state, so most commands hit real jobs and
// leases, and shrinking (dropping intents) always leaves a runnable sequence.

export type Decide = (command: Command, state: KeyState, now: number) => E.Either<DomainError, readonly KeyEvent[]>;

export const T0 = Date.UTC(2030, 0, 1);

interface JobIntent {
  /** Re-use a known job id (by position) instead of a fresh one. */
  readonly reuse: number | null;
  readonly priority: number;
  /** runAt relative to now (negative: already due), or null. */
  readonly delay: number | null;
  readonly maxAttempts: number;
  readonly leaseMs: number | null;
  readonly queue: string;
  /** What the job does when its key is full at enqueue (null: park, the default); replace debounces jobs of its name. */
  readonly whenFull: 'park' | 'reject' | 'replace' | null;
  /** Its name, among two: replace debounces the parked jobs of the same name. */
  readonly name: 'work' | 'report';
}

interface Policy {
  readonly limit: number | null;
  readonly ownsLimit: boolean;
  readonly leaseMs: number | null;
}

export type LeaseOp = 'Start' | 'Renew' | 'Complete' | 'Fail' | 'Yield' | 'Stopped';

export type Intent = { readonly dt: number } & (
  | { readonly kind: 'enqueue'; readonly many: boolean; readonly jobs: readonly JobIntent[]; readonly policy: Policy }
  | {
      readonly kind: 'lease';
      readonly op: LeaseOp;
      readonly pick: number;
      readonly stale: boolean;
      /** A stale lease of the same job when it had one (a reclaimed holder), else any other lease. */
      readonly sameJob: boolean;
      readonly leasePick: number;
      readonly worker: number;
      readonly jitter: number;
      /** Complete/Fail hand the freed slot's next job to a worker of this queue (null: no handoff). */
      readonly handOffQueue: string | null;
      /** A Yield gives the job back for this long (a worker without its handler); null: a shutdown's yield. */
      readonly yieldDelay: number | null;
    }
  | { readonly kind: 'admitDue' }
  | { readonly kind: 'expireLeases'; readonly jitter: number }
  | { readonly kind: 'setLimit'; readonly limit: number; readonly leaseMs: number | null }
  | { readonly kind: 'pause'; readonly reason: string | null }
  | { readonly kind: 'resume' }
  | { readonly kind: 'revoke'; readonly pick: number | null; readonly jitter: number; readonly force: boolean }
  | { readonly kind: 'discard'; readonly mask: number | null; readonly stray: number | null }
  | { readonly kind: 'cancel'; readonly pick: number }
  /** An operator retries a dead job (stray: a job the key still holds, which is refused). */
  | { readonly kind: 'retry'; readonly pick: number; readonly stray: boolean; readonly discard: boolean }
);

export interface Scenario {
  readonly start: number;
  readonly intents: readonly Intent[];
}

/** How far the clock moves before a command: often not at all, sometimes past leases (1-10 s), retries and schedules. */
const dtArb = fc.oneof(
  { weight: 5, arbitrary: fc.constant(0) },
  { weight: 4, arbitrary: fc.integer({ min: 1, max: 3_000 }) },
  { weight: 2, arbitrary: fc.integer({ min: 3_000, max: 40_000 }) },
  { weight: 1, arbitrary: fc.integer({ min: 40_000, max: 4 * 3_600_000 }) },
);
const pickArb = fc.nat({ max: 1_000 });
/** `arb` in `percent`% of the draws, null otherwise (shrinking towards null). */
const sometimes = <T>(arb: fc.Arbitrary<T>, percent: number): fc.Arbitrary<T | null> =>
  fc.oneof({ weight: 100 - percent, arbitrary: fc.constant(null) }, { weight: percent, arbitrary: arb });
const jitterArb = fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true });
const leaseMsArb = fc.integer({ min: 1_000, max: 10_000 });

const jobIntentArb: fc.Arbitrary<JobIntent> = fc.record({
  reuse: sometimes(pickArb, 15),
  priority: fc.integer({ min: -2, max: 3 }),
  delay: sometimes(fc.integer({ min: -5_000, max: 20_000 }), 40),
  maxAttempts: fc.integer({ min: 1, max: 3 }),
  leaseMs: sometimes(fc.integer({ min: 1_000, max: 8_000 }), 40),
  queue: fc.constantFrom('default', 'default', 'other'),
  whenFull: sometimes(fc.constantFrom('park' as const, 'reject' as const, 'replace' as const), 30),
  name: fc.constantFrom('work' as const, 'work' as const, 'report' as const),
});

const policyArb: fc.Arbitrary<Policy> = fc.record({
  limit: sometimes(fc.integer({ min: 1, max: 4 }), 20),
  // Half of the enqueues naming a limit own it (may change it); the others are refused when it differs.
  ownsLimit: fc.boolean(),
  leaseMs: sometimes(leaseMsArb, 20),
});

const withDt = <T extends object>(arb: fc.Arbitrary<T>): fc.Arbitrary<Intent> =>
  fc.tuple(dtArb, arb).map(([dt, rest]) => ({ dt, ...rest }) as unknown as Intent);

const intentArb: fc.Arbitrary<Intent> = fc.oneof(
  {
    weight: 16,
    arbitrary: withDt(
      fc.record({
        kind: fc.constant('enqueue' as const),
        many: fc.constant(false),
        jobs: fc.tuple(jobIntentArb),
        policy: policyArb,
      }),
    ),
  },
  {
    weight: 6,
    arbitrary: withDt(
      fc.record({
        kind: fc.constant('enqueue' as const),
        many: fc.constant(true),
        jobs: fc.array(jobIntentArb, { minLength: 2, maxLength: 5 }),
        policy: policyArb,
      }),
    ),
  },
  {
    weight: 36,
    arbitrary: withDt(
      fc.record({
        kind: fc.constant('lease' as const),
        op: fc.constantFrom<LeaseOp>('Start', 'Start', 'Start', 'Complete', 'Complete', 'Complete', 'Fail', 'Renew', 'Yield', 'Stopped'),
        pick: pickArb,
        stale: fc.integer({ min: 0, max: 4 }).map((n) => n === 0),
        sameJob: fc.boolean(),
        leasePick: pickArb,
        worker: fc.nat({ max: 3 }),
        jitter: jitterArb,
        handOffQueue: fc.constantFrom<string | null>(null, null, 'default', 'other'),
        yieldDelay: sometimes(fc.integer({ min: 1, max: 30_000 }), 50),
      }),
    ),
  },
  { weight: 9, arbitrary: withDt(fc.record({ kind: fc.constant('admitDue' as const) })) },
  { weight: 9, arbitrary: withDt(fc.record({ kind: fc.constant('expireLeases' as const), jitter: jitterArb })) },
  {
    weight: 6,
    arbitrary: withDt(
      fc.record({ kind: fc.constant('setLimit' as const), limit: fc.integer({ min: 1, max: 4 }), leaseMs: sometimes(leaseMsArb, 50) }),
    ),
  },
  { weight: 2, arbitrary: withDt(fc.record({ kind: fc.constant('pause' as const), reason: sometimes(fc.constantFrom('vendor outage', 'deploy'), 50) })) },
  { weight: 2, arbitrary: withDt(fc.record({ kind: fc.constant('resume' as const) })) },
  {
    weight: 4,
    arbitrary: withDt(fc.record({ kind: fc.constant('revoke' as const), pick: sometimes(pickArb, 70), jitter: jitterArb, force: fc.integer({ min: 0, max: 4 }).map((n) => n === 0) })),
  },
  {
    weight: 4,
    arbitrary: withDt(
      fc.record({
        kind: fc.constant('discard' as const),
        mask: sometimes(fc.nat({ max: 255 }), 60),
        stray: sometimes(pickArb, 20),
      }),
    ),
  },
  { weight: 5, arbitrary: withDt(fc.record({ kind: fc.constant('cancel' as const), pick: pickArb })) },
  { weight: 4, arbitrary: withDt(fc.record({ kind: fc.constant('retry' as const), pick: pickArb, stray: fc.integer({ min: 0, max: 4 }).map((n) => n === 0), discard: fc.integer({ min: 0, max: 3 }).map((n) => n === 0) })) },
);

export const scenarioArb = (maxLength = 40): fc.Arbitrary<Scenario> =>
  fc.record({
    start: fc.integer({ min: T0, max: T0 + 365 * 86_400_000 }),
    intents: fc.array(intentArb, { maxLength, size: 'max' }),
  });

// ---------------------------------------------------------------------------------------------
// The interpreter

export interface Step {
  readonly index: number;
  readonly now: number;
  readonly intent: Intent;
  readonly command: Command;
  readonly before: KeyState;
  readonly result: E.Either<DomainError, readonly KeyEvent[]>;
  /** The step's events ([] when refused). */
  readonly events: readonly KeyEvent[];
  readonly after: KeyState;
}

export interface Trace {
  readonly scenario: Scenario;
  readonly steps: readonly Step[];
  readonly events: readonly KeyEvent[];
  readonly final: KeyState;
}

export interface RunOptions {
  readonly decide?: Decide;
}

/** Freezes a value deeply, so a decider that mutates its input state throws (ESM is strict). */
export const deepFreeze = <T>(value: T): T => {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
};

const at = <A>(xs: readonly A[], n: number): A | undefined => (xs.length === 0 ? undefined : xs[n % xs.length]);

const bySeq = (a: JobEntry, b: JobEntry) => a.seq - b.seq;

export const jobIdOf = (event: KeyEvent): string | undefined =>
  'jobId' in event.data ? (event.data as { jobId: string }).jobId : undefined;

interface Memory {
  /** Every job id ever enqueued, in first-enqueue order. */
  readonly known: string[];
  readonly knownSet: Set<string>;
  /** Every lease id ever issued, with its job. */
  readonly leases: { readonly jobId: string; readonly leaseId: string }[];
  /** What each job's JobEnqueued said, for a retry (the command layer reads it from the ledger). */
  readonly specs: Map<string, Extract<Command, { type: 'RetryJob' }>['job']>;
  /** Jobs dead now (not retried since), in order of death. */
  readonly dead: string[];
  /** Dead jobs discarded since. */
  readonly discarded: string[];
  fresh: number;
}

const entriesOf = (state: KeyState): JobEntry[] =>
  Object.entries(state.jobs)
    .map(([jobId, job]) => ({ ...job, jobId }))
    .sort(bySeq);

const toCommand = (intent: Intent, state: KeyState, now: number, memory: Memory): Command => {
  const by = 'operator';
  switch (intent.kind) {
    case 'enqueue': {
      const batch: string[] = [];
      const jobs = intent.jobs.map((j, i) => {
        // Re-enqueues reuse active ids only: the decider remembers active jobs, and the command
        // layer drops ids already recorded in the store before deciding (a finished job's id never
        // reaches the decider again; see test/commands/key-writer.int.test.ts, "a given jobId enqueued
        // again after the job finished").
        const pool = [...entriesOf(state).map((e) => e.jobId), ...batch];
        const reused = j.reuse === null ? undefined : at(pool, j.reuse);
        const jobId = reused ?? `j${memory.fresh++}`;
        batch.push(jobId);
        return {
          jobId,
          name: j.name,
          args: { n: i, tags: ['a', j.priority] },
          queue: j.queue,
          priority: j.priority,
          maxAttempts: j.maxAttempts,
          runAt: j.delay === null ? null : now + j.delay,
          ...(j.leaseMs === null ? {} : { leaseMs: j.leaseMs }),
          ...(j.whenFull === null ? {} : { whenFull: j.whenFull }),
        };
      });
      const policy = {
        ...(intent.policy.limit === null ? {} : { limit: intent.policy.limit }),
        ...(intent.policy.limit !== null && intent.policy.ownsLimit ? { ownsLimit: true as const } : {}),
        ...(intent.policy.leaseMs === null ? {} : { leaseMs: intent.policy.leaseMs }),
      };
      return intent.many ? { type: 'EnqueueMany', jobs, ...policy } : { type: 'Enqueue', job: jobs[0]!, ...policy };
    }
    case 'lease': {
      const hs = holders(state).sort(bySeq);
      const started = hs.filter((h) => h.lease?.workerId != null);
      const unstarted = hs.filter((h) => h.lease?.workerId == null);
      const revoked = started.filter((h) => h.lease?.revoked !== undefined);
      const preferred = intent.op === 'Start' ? unstarted : intent.op === 'Complete' || intent.op === 'Fail' ? started : intent.op === 'Stopped' ? revoked : hs;
      const pool = preferred.length > 0 ? preferred : hs;
      let jobId: string;
      let leaseId: string;
      const holder = at(pool, intent.pick);
      if (!intent.stale && holder?.lease) {
        jobId = holder.jobId;
        leaseId = holder.lease.leaseId;
      } else {
        // A lease that is not (or no longer) the job's: seen earlier for this job or for another one.
        jobId = at([...hs.map((h) => h.jobId), ...memory.known], intent.pick) ?? 'ghost';
        const current = state.jobs[jobId]?.lease?.leaseId;
        const others = memory.leases.filter((l) => l.leaseId !== current);
        const own = others.filter((l) => l.jobId === jobId);
        leaseId = at(intent.sameJob && own.length > 0 ? own : others, intent.leasePick)?.leaseId ?? `${jobId}:never-issued`;
      }
      const handOff = intent.handOffQueue === null ? {} : { handOffTo: { workerId: `worker-${intent.worker}`, queue: intent.handOffQueue } };
      switch (intent.op) {
        case 'Start':
          return { type: 'Start', jobId, leaseId, workerId: `worker-${intent.worker}` };
        case 'Renew':
          return { type: 'Renew', jobId, leaseId };
        case 'Complete':
          return { type: 'Complete', jobId, leaseId, ...handOff };
        case 'Fail':
          return { type: 'Fail', jobId, leaseId, error: 'boom', jitter: intent.jitter, ...handOff };
        case 'Stopped':
          return { type: 'Stopped', jobId, leaseId, jitter: intent.jitter };
        case 'Yield':
          return intent.yieldDelay === null
            ? { type: 'Yield', jobId, leaseId }
            : {
                type: 'Yield',
                jobId,
                leaseId,
                delayMs: intent.yieldDelay,
                reason: `no handler for work in worker worker-${intent.worker}`,
                // Half the workers give a job up after its give-backs have lasted a while (issue 21 #6).
                ...(intent.worker % 2 === 0 ? { deadAfterMs: 3 * intent.yieldDelay, name: 'work' } : {}),
              };
      }
    }
    case 'admitDue':
      return { type: 'AdmitDue' };
    case 'expireLeases':
      return { type: 'ExpireLeases', jitter: intent.jitter };
    case 'setLimit':
      return { type: 'SetLimit', limit: intent.limit, by, ...(intent.leaseMs === null ? {} : { leaseMs: intent.leaseMs }) };
    case 'pause':
      return { type: 'PauseKey', by, ...(intent.reason === null ? {} : { reason: intent.reason }) };
    case 'resume':
      return { type: 'ResumeKey', by };
    case 'revoke': {
      const force = intent.force ? { force: true as const } : {};
      if (intent.pick === null) return { type: 'RevokeLease', by, jitter: intent.jitter, ...force };
      const hs = holders(state).sort(bySeq);
      const jobId = at(hs, intent.pick)?.jobId ?? at(memory.known, intent.pick) ?? 'ghost';
      return { type: 'RevokeLease', by, jitter: intent.jitter, jobId, ...force };
    }
    case 'discard': {
      if (intent.mask === null) return { type: 'DiscardParked', by };
      const mask = intent.mask;
      const parked = jobsIn(state, 'parked').sort(bySeq);
      const jobIds = parked.filter((_, i) => (mask >> i) & 1).map((j) => j.jobId);
      if (intent.stray !== null) {
        const notParked = [...memory.known.filter((id) => state.jobs[id]?.status !== 'parked'), 'ghost'];
        jobIds.push(at(notParked, intent.stray)!);
      }
      return { type: 'DiscardParked', by, jobIds };
    }
    case 'cancel':
      return { type: 'Cancel', by, jobId: at([...memory.known, 'ghost'], intent.pick)! };
    case 'retry': {
      // Strays: jobs the key holds, and dead jobs discarded since (a second operator acting on them).
      const strays = [...entriesOf(state).map((e) => e.jobId), ...memory.discarded];
      const jobId = at(intent.stray || memory.dead.length === 0 ? strays : memory.dead, intent.pick) ?? at(memory.dead, intent.pick);
      // Nothing dead and nothing held: no retry the command layer would send.
      if (jobId === undefined) return { type: 'AdmitDue' };
      if (intent.discard) return { type: 'DiscardDead', jobId, by };
      return { type: 'RetryJob', jobId, by, job: memory.specs.get(jobId)! };
    }
  }
};

/** Runs a scenario from a fresh key: decide, then fold on Right; a Left changes nothing. */
export const runScenario = (scenario: Scenario, options: RunOptions = {}): Trace => {
  const decide = options.decide ?? domainDecide;
  const memory: Memory = { known: [], knownSet: new Set(), leases: [], specs: new Map(), dead: [], discarded: [], fresh: 0 };
  const steps: Step[] = [];
  const events: KeyEvent[] = [];
  let state = deepFreeze(initialKeyState);
  let now = scenario.start;
  scenario.intents.forEach((intent, index) => {
    now += intent.dt;
    const raw = toCommand(intent, state, now, memory);
    // Every generated command must be one the command layer would accept.
    const decoded = decodeCommand(raw);
    if (E.isLeft(decoded)) throw new Error(`generator produced an invalid command ${JSON.stringify(raw)}: ${decoded.left.message}`);
    const command = deepFreeze(decoded.right);
    const result = decide(command, state, now);
    const stepEvents = E.isRight(result) ? deepFreeze([...result.right]) : [];
    const after = E.isRight(result) ? deepFreeze(fold(state, stepEvents)) : state;
    for (const e of stepEvents) {
      const jobId = jobIdOf(e);
      if (e.type === 'JobEnqueued' && jobId !== undefined && !memory.knownSet.has(jobId)) {
        memory.knownSet.add(jobId);
        memory.known.push(jobId);
        memory.specs.set(jobId, { queue: e.data.queue, priority: e.data.priority, maxAttempts: e.data.maxAttempts, leaseMs: e.data.leaseMs });
      }
      if (e.type === 'JobDead') memory.dead.push(e.data.jobId);
      if (e.type === 'JobRetried') memory.dead.splice(memory.dead.indexOf(e.data.jobId), 1);
      if (e.type === 'DeadDiscarded') {
        memory.dead.splice(memory.dead.indexOf(e.data.jobId), 1);
        memory.discarded.push(e.data.jobId);
      }
      if ((e.type === 'SlotAcquired' || e.type === 'JobPromoted') && jobId !== undefined) {
        memory.leases.push({ jobId, leaseId: e.data.leaseId });
      }
    }
    steps.push({ index, now, intent, command, before: state, result, events: stepEvents, after });
    events.push(...stepEvents);
    state = after;
  });
  return { scenario, steps, events, final: state };
};

// ---------------------------------------------------------------------------------------------
// Reading a trace

export interface EventVisit {
  readonly step: Step;
  readonly event: KeyEvent;
  /** Position of the event within its step's append. */
  readonly position: number;
  readonly before: KeyState;
  readonly after: KeyState;
}

/**
 * Folds the trace event by event, so a check can look at the state just before and after each
 * event; `afterStep` sees each step once its events are folded.
 */
export const forEachEvent = (trace: Trace, visit: (v: EventVisit) => void, afterStep?: (step: Step) => void): void => {
  for (const step of trace.steps) {
    let state = step.before;
    step.events.forEach((event, position) => {
      const next = fold(state, [event]);
      visit({ step, event, position, before: state, after: next });
      state = next;
    });
    afterStep?.(step);
  }
};

const describeResult = (step: Step): string =>
  E.isLeft(step.result)
    ? `Left ${step.result.left.tag}`
    : `[${step.events.map((e) => `${e.type}${jobIdOf(e) === undefined ? '' : `(${jobIdOf(e)})`}`).join(', ')}]`;

const describeCommand = (c: Command, now: number): string => {
  const rel = (t: number | null) => (t === null ? null : `now${t - now >= 0 ? '+' : ''}${t - now}`);
  const job = (j: { jobId: string; priority: number; runAt: number | null; maxAttempts: number; leaseMs?: number | undefined }) =>
    `${j.jobId} p=${j.priority} runAt=${rel(j.runAt)} max=${j.maxAttempts}${j.leaseMs === undefined ? '' : ` lease=${j.leaseMs}`}`;
  switch (c.type) {
    case 'Enqueue':
      return `Enqueue ${job(c.job)}${c.limit === undefined ? '' : ` limit=${c.limit}`}${c.leaseMs === undefined ? '' : ` keyLease=${c.leaseMs}`}`;
    case 'EnqueueMany':
      return `EnqueueMany [${c.jobs.map(job).join('; ')}]${c.limit === undefined ? '' : ` limit=${c.limit}`}${c.leaseMs === undefined ? '' : ` keyLease=${c.leaseMs}`}`;
    default:
      return JSON.stringify(c);
  }
};

/** The command sequence up to and including step `upTo`, one line each, for a failure message. */
export const describeTrace = (trace: Trace, upTo = trace.steps.length - 1): string =>
  trace.steps
    .slice(0, upTo + 1)
    .map((s) => `  #${s.index} t=+${s.now - trace.scenario.start}ms ${describeCommand(s.command, s.now)} -> ${describeResult(s)}`)
    .join('\n');

/** Fails with the invariant, the detail and the command sequence that led there. */
export const violation = (trace: Trace, step: Step, what: string): never => {
  throw new Error(`${what}\nat step #${step.index} (t=+${step.now - trace.scenario.start}ms); sequence:\n${describeTrace(trace, step.index)}`);
};

import fc from 'fast-check';
import * as E from 'fp-ts/lib/Either.js';
import { describe, expect, it } from 'vitest';
import { auditKeyOf, describeEvents, handoffsOf, jobName, type Handoff, type RevisionedEvent } from '../../src/domain/audit.js';
import type { Command, JobSpec } from '../../src/domain/commands.js';
import { decide, decideAll } from '../../src/domain/decide/index.js';
import type { KeyEvent } from '../../src/domain/events.js';
import { fold, holders, initialKeyState, type KeyState } from '../../src/domain/key-state.js';
import { keyStream } from '../../src/domain/streams.js';
import { describeTrace, runScenario, scenarioArb } from './arbitraries.js';
import { LEASE, SEC, T0, job } from './spec.js';

// The audit fold over streams the decider wrote: named handoff sequences, then a property over
// random command sequences.

/** Runs commands through the decider (each at its time), numbering the events as the store would. */
const play = (...steps: readonly (readonly [Command, number])[]): RevisionedEvent[] => {
  let state = initialKeyState;
  const out: RevisionedEvent[] = [];
  for (const [command, now] of steps) {
    const result = decide(command, state, now);
    if (E.isLeft(result)) throw new Error(`${command.type} refused: ${result.left.tag}`);
    for (const event of result.right) out.push({ revision: out.length, event });
    state = fold(state, result.right);
  }
  return out;
};

const enqueue = (jobId: string, limit = 1): Command => ({ type: 'Enqueue', limit, job: job(jobId) });
const startCmd = (jobId: string, leaseId: string, workerId = 'w1'): Command => ({ type: 'Start', jobId, leaseId, workerId });

/** A handoff with the fields a spec does not name at their "nothing happened" values. */
const handoff = (h: Pick<Handoff, 'jobId' | 'leaseId' | 'acquiredAt' | 'acquiredRevision'> & Partial<Handoff>): Handoff => ({
  key: 'k',
  attempt: null,
  how: 'acquired',
  parkedMs: null,
  workerId: null,
  startedAt: null,
  releasedAt: null,
  reason: null,
  by: null,
  error: null,
  releasedRevision: null,
  ...h,
});

describe('handoffsOf', () => {
  it('a dead job retried comes back as a new handoff under a new lease, with its attempt counted afresh; the retry and a discard say who', () => {
    const retry: Command = { type: 'RetryJob', jobId: 'a', by: 'alice', job: { queue: 'default', priority: 0, maxAttempts: 1, leaseMs: LEASE } };
    const events = play(
      [{ type: 'Enqueue', limit: 1, job: job('a', { maxAttempts: 1 }) }, T0],
      [startCmd('a', 'a:1'), T0 + SEC],
      [{ type: 'Fail', jobId: 'a', leaseId: 'a:1', error: 'boom', jitter: 0 }, T0 + 2 * SEC],
      [retry, T0 + 5 * SEC],
      [startCmd('a', 'a:2'), T0 + 6 * SEC],
      [{ type: 'Fail', jobId: 'a', leaseId: 'a:2', error: 'boom again', jitter: 0 }, T0 + 7 * SEC],
      [{ type: 'DiscardDead', jobId: 'a', by: 'bob' }, T0 + 8 * SEC],
    );
    expect(handoffsOf('k', events).map((h) => [h.leaseId, h.attempt, h.reason, h.error])).toEqual([
      ['a:1', 1, 'failed', 'boom'],
      ['a:2', 1, 'failed', 'boom again'],
    ]);
    const words = describeEvents(events.map((e) => e.event));
    expect(words).toContain('dead job a retried by alice: 1 fresh attempt, priority 0');
    expect(words.at(-1)).toBe('dead job a discarded by bob');
  });

  it('completion hands the slot to the parked job, which records how long it waited; its failure records the error', () => {
    const events = play(
      [enqueue('a'), T0], // 0 KeyLimitSet, 1 JobEnqueued, 2 SlotAcquired
      [enqueue('b'), T0 + SEC], // 3 JobEnqueued, 4 JobParked
      [startCmd('a', 'a:1'), T0 + 2 * SEC], // 5
      [{ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, T0 + 5 * SEC], // 6 JobCompleted, 7 SlotReleased, 8 JobPromoted
      [startCmd('b', 'b:2', 'w2'), T0 + 6 * SEC], // 9
      [{ type: 'Fail', jobId: 'b', leaseId: 'b:2', error: 'smtp down', jitter: 0 }, T0 + 7 * SEC], // 10 JobFailed, 11 SlotReleased, 12 JobScheduled
    );
    expect(handoffsOf('k', events)).toEqual([
      handoff({ jobId: 'a', leaseId: 'a:1', acquiredAt: T0, acquiredRevision: 2, attempt: 1, workerId: 'w1', startedAt: T0 + 2 * SEC, releasedAt: T0 + 5 * SEC, reason: 'completed', releasedRevision: 7 }),
      handoff({
        jobId: 'b',
        leaseId: 'b:2',
        how: 'promoted',
        parkedMs: 4 * SEC,
        acquiredAt: T0 + 5 * SEC,
        acquiredRevision: 8,
        attempt: 1,
        workerId: 'w2',
        startedAt: T0 + 6 * SEC,
        releasedAt: T0 + 7 * SEC,
        reason: 'failed',
        error: 'smtp down',
        releasedRevision: 11,
      }),
    ]);
  });

  it('a revoked lease names the operator; the retry comes back as a new handoff with the next attempt', () => {
    const events = play(
      [enqueue('a'), T0], // 0-2
      [startCmd('a', 'a:1'), T0 + SEC], // 3
      [{ type: 'RevokeLease', by: 'alice', jitter: 0, jobId: 'a' }, T0 + 2 * SEC], // 4 LeaseRevoked
      [{ type: 'Stopped', jobId: 'a', leaseId: 'a:1', jitter: 0 }, T0 + 3 * SEC], // 5 SlotReleased, 6 JobScheduled
      [{ type: 'AdmitDue' }, T0 + 3_600 * SEC], // 7 SlotAcquired a:2
      [startCmd('a', 'a:2', 'w2'), T0 + 3_601 * SEC], // 8
    );
    expect(handoffsOf('k', events)).toEqual([
      handoff({ jobId: 'a', leaseId: 'a:1', acquiredAt: T0, acquiredRevision: 2, attempt: 1, workerId: 'w1', startedAt: T0 + SEC, releasedAt: T0 + 3 * SEC, reason: 'revoked', by: 'alice', releasedRevision: 5 }),
      handoff({ jobId: 'a', leaseId: 'a:2', acquiredAt: T0 + 3_600 * SEC, acquiredRevision: 7, attempt: 2, workerId: 'w2', startedAt: T0 + 3_601 * SEC }),
    ]);
  });

  it('an admission nobody started keeps its slot past its lease; a started one gone silent is expired and its job retried', () => {
    const events = play(
      [enqueue('a'), T0], // 0-2
      [enqueue('b'), T0], // 3 JobEnqueued, 4 JobParked
      [{ type: 'ExpireLeases', jitter: 0 }, T0 + 10 * LEASE], // nothing: a:1 was never started
      [startCmd('a', 'a:1'), T0 + 10 * LEASE], // 5
      [{ type: 'ExpireLeases', jitter: 0 }, T0 + 11 * LEASE], // 6 LeaseExpired, 7 SlotReleased, 8 JobScheduled, 9 JobPromoted b:2
    );
    expect(handoffsOf('k', events)).toEqual([
      handoff({
        jobId: 'a', leaseId: 'a:1', acquiredAt: T0, acquiredRevision: 2, attempt: 1, workerId: 'w1', startedAt: T0 + 10 * LEASE,
        releasedAt: T0 + 11 * LEASE, reason: 'expired', releasedRevision: 7,
      }),
      handoff({ jobId: 'b', leaseId: 'b:2', how: 'promoted', parkedMs: 11 * LEASE, acquiredAt: T0 + 11 * LEASE, acquiredRevision: 9 }),
    ]);
  });

  it('a yield gives the slot to the job ahead in line; a cancelled holder names who cancelled it; a cancelled parked job had no handoff', () => {
    const events = play(
      [enqueue('a'), T0], // 0-2
      [{ type: 'Enqueue', limit: 1, job: job('b', { priority: -1 }) }, T0 + SEC], // 3 JobEnqueued, 4 JobParked
      [enqueue('c'), T0 + SEC], // 5 JobEnqueued, 6 JobParked
      [startCmd('a', 'a:1'), T0 + 2 * SEC], // 7
      [{ type: 'Yield', jobId: 'a', leaseId: 'a:1' }, T0 + 3 * SEC], // 8 JobYielded, 9 SlotReleased, 10 JobParked a, 11 JobPromoted b
      [{ type: 'Cancel', jobId: 'c', by: 'carol' }, T0 + 4 * SEC], // 12 JobCancelled c (parked)
      [{ type: 'Cancel', jobId: 'b', by: 'bob' }, T0 + 5 * SEC], // 13 JobCancelled, 14 SlotReleased, 15 JobPromoted a
    );
    expect(handoffsOf('k', events)).toEqual([
      handoff({ jobId: 'a', leaseId: 'a:1', acquiredAt: T0, acquiredRevision: 2, attempt: 1, workerId: 'w1', startedAt: T0 + 2 * SEC, releasedAt: T0 + 3 * SEC, reason: 'yielded', releasedRevision: 9 }),
      handoff({ jobId: 'b', leaseId: 'b:2', how: 'promoted', parkedMs: 2 * SEC, acquiredAt: T0 + 3 * SEC, acquiredRevision: 11, releasedAt: T0 + 5 * SEC, reason: 'cancelled', by: 'bob', releasedRevision: 14 }),
      handoff({ jobId: 'a', leaseId: 'a:3', how: 'promoted', parkedMs: 2 * SEC, acquiredAt: T0 + 5 * SEC, acquiredRevision: 15 }),
    ]);
  });

  it('a raised limit promotes parked jobs; a stream without admissions has no handoffs', () => {
    const events = play(
      [enqueue('a'), T0], // 0-2
      [enqueue('b'), T0 + SEC], // 3-4
      [{ type: 'SetLimit', limit: 2, by: 'dave' }, T0 + 3 * SEC], // 5 KeyLimitSet, 6 JobPromoted b
    );
    expect(handoffsOf('k', events).map((h) => [h.jobId, h.how, h.parkedMs, h.acquiredRevision])).toEqual([
      ['a', 'acquired', null, 2],
      ['b', 'promoted', 2 * SEC, 6],
    ]);
    expect(handoffsOf('k', play([{ type: 'SetLimit', limit: 2, by: 'dave' }, T0]))).toEqual([]);
  });
});


// ---------------------------------------------------------------------------------------------
// A limit key: the jobs of other keys under its limit (JobEnqueued.limits) hold its slots as guests

/**
 * Runs commands on their streams through the decider over several streams (decideAll), numbering
 * each stream's events as the store would.
 */
const playAcross = (...steps: readonly (readonly [string, Command, number])[]) => {
  const states = new Map<string, KeyState>();
  const streams = new Map<string, RevisionedEvent[]>();
  for (const [stream, command, now] of steps) {
    const outcome = decideAll(command, stream, states, now);
    if (outcome.tag === 'needs') throw new Error(`${command.type} needs ${outcome.streams.join(', ')}`);
    if (E.isLeft(outcome.result)) throw new Error(`${command.type} refused: ${outcome.result.left.tag}`);
    for (const [s, events] of outcome.result.right) {
      const out = streams.get(s) ?? [];
      for (const event of events) out.push({ revision: out.length, event });
      streams.set(s, out);
      states.set(s, fold(states.get(s) ?? initialKeyState, events));
    }
  }
  return { of: (key: string) => streams.get(keyStream(key)) ?? [], state: (key: string) => states.get(keyStream(key))! };
};

const underT = (jobId: string, overrides: Partial<JobSpec> = {}): Command => ({ type: 'Enqueue', limit: 1, job: job(jobId, { limits: [{ key: 't' }], ...overrides }) });

describe('handoffsOf on a limit key', () => {
  const run = () =>
    playAcross(
      ['key:a', underT('j1'), T0], // a: 0 KeyLimitSet, 1 JobEnqueued, 2 SlotAcquired; t: 0 KeyLimitSet, 1 LimitHeld j1
      ['key:b', underT('j2'), T0 + SEC], // b: 0 KeyLimitSet, 1 JobEnqueued, 2 JobParked; t: 2 LimitWaiting j2
      ['key:a', startCmd('j1', 'j1:1'), T0 + 2 * SEC], // a: 3
      ['key:a', { type: 'Fail', jobId: 'j1', leaseId: 'j1:1', error: 'smtp down', jitter: 0 }, T0 + 3 * SEC], // a: 4 JobFailed, 5 SlotReleased, 6 JobScheduled; t: 3 LimitReleased j1, 4 LimitHeld j2 (b: 3 JobPromoted)
      ['key:b', underT('j3'), T0 + 4 * SEC], // b: 4 JobEnqueued, 5 JobParked; t: 5 LimitWaiting j3
      ['key:b', { type: 'Cancel', jobId: 'j3', by: 'carol' }, T0 + 5 * SEC], // b: 6 JobCancelled; t: 6 LimitLeft j3
      ['key:b', { type: 'RevokeLease', jobId: 'j2', by: 'alice', jitter: 0 }, T0 + 6 * SEC], // b: LeaseRevoked, SlotReleased, JobParked, JobPromoted; t: LimitReleased, LimitWaiting, LimitHeld
    );

  it('a guest holds from LimitHeld to LimitReleased, named with its home and limits; a wait in its line makes it a promotion', () => {
    const t = run().of('t');
    expect(t.map((r) => r.event.type)).toEqual([
      'KeyLimitSet', 'LimitHeld', 'LimitWaiting', 'LimitReleased', 'LimitHeld', 'LimitWaiting', 'LimitLeft', 'LimitReleased', 'LimitWaiting', 'LimitHeld',
    ]);
    const guest = { key: 't', limits: ['t'] } as const;
    expect(handoffsOf('t', t)).toEqual([
      handoff({ ...guest, jobId: 'j1', leaseId: 'j1:1', home: 'a', acquiredAt: T0, acquiredRevision: 1, releasedAt: T0 + 3 * SEC, reason: 'failed', releasedRevision: 3 }),
      handoff({ ...guest, jobId: 'j2', leaseId: 'j2:1', home: 'b', how: 'promoted', parkedMs: 2 * SEC, acquiredAt: T0 + 3 * SEC, acquiredRevision: 4, releasedAt: T0 + 6 * SEC, reason: 'revoked', releasedRevision: 7 }),
      // Revoked before it started: it parked and, both its keys free, was promoted in the same append.
      handoff({ ...guest, jobId: 'j2', leaseId: 'j2:2', home: 'b', how: 'promoted', parkedMs: 0, acquiredAt: T0 + 6 * SEC, acquiredRevision: 9 }),
    ]);
  });

  it("the home key's handoffs say which further limits the job held; its audit keeps the who and what", () => {
    const played = run();
    expect(handoffsOf('a', played.of('a'))).toEqual([
      handoff({ key: 'a', jobId: 'j1', leaseId: 'j1:1', limits: ['t'], acquiredAt: T0, acquiredRevision: 2, attempt: 1, workerId: 'w1', startedAt: T0 + 2 * SEC, releasedAt: T0 + 3 * SEC, reason: 'failed', error: 'smtp down', releasedRevision: 5 }),
    ]);
    expect(handoffsOf('b', played.of('b')).map((h) => [h.leaseId, h.limits, h.reason, h.by])).toEqual([
      ['j2:1', ['t'], 'revoked', 'alice'],
      ['j2:2', ['t'], null, null],
    ]);
    // A job under its key alone has no `limits`, and a key's own job no `home`.
    const plain = handoffsOf('k', play([enqueue('x'), T0]));
    expect(plain[0]).not.toHaveProperty('limits');
    expect(plain[0]).not.toHaveProperty('home');
  });

  it('a guest that leaves the line without a slot leaves no handoff; a finished id enqueued again keeps no old limits', () => {
    const t = handoffsOf('t', run().of('t'));
    expect(t.some((h) => h.jobId === 'j3')).toBe(false);
    const again = handoffsOf('a', playAcross(
      ['key:a', underT('j1'), T0],
      ['key:a', startCmd('j1', 'j1:1'), T0],
      ['key:a', { type: 'Complete', jobId: 'j1', leaseId: 'j1:1' }, T0 + SEC],
      ['key:a', enqueue('j1'), T0 + 2 * SEC],
    ).of('a'));
    expect(again.map((h) => [h.leaseId, h.limits])).toEqual([['j1:1', ['t']], ['j1:2', undefined]]);
  });

  it('describes each event in words, naming a guest with its home', () => {
    const words = describeEvents(run().of('t').map((r) => r.event));
    expect(words).toEqual([
      'limit set to 1, lease 30 s',
      'job j1 of key a holds a slot of this key (lease j1:1, under limits t)',
      "job j2 of key b waits in this key's line (it is parked at home, under limits t)",
      'job j1 of key a let its slot of this key go (lease j1:1): failed',
      'job j2 of key b holds a slot of this key (lease j2:1, after 2 s waiting, under limits t)',
      "job j3 of key b waits in this key's line (it is parked at home, under limits t)",
      "job j3 of key b left this key's line without a slot: cancelled by carol",
      'job j2 of key b let its slot of this key go (lease j2:1): revoked',
      "job j2 of key b waits in this key's line (it is parked at home, under limits t)",
      'job j2 of key b holds a slot of this key (lease j2:2, under limits t)',
    ]);
    expect([jobName('j1', undefined), jobName('j1', 'a'), jobName('j1', 'job:j1')]).toEqual(['j1', 'job j1 of key a', 'job j1 (no key)']);
    expect(describeEvents(run().of('a').map((r) => r.event)).slice(1, 3)).toEqual([
      'job j1 (sendEmail) enqueued on queue default, priority 0, under limits t',
      'job j1 took a free slot (lease j1:1)',
    ]);
  });
});

// ---------------------------------------------------------------------------------------------
// Over random command sequences

const revisioned = (events: readonly KeyEvent[]): RevisionedEvent[] => events.map((event, revision) => ({ revision, event }));

/** One stream's history as a property checks it: its events, its state after them, and how it came about. */
interface Subject {
  readonly events: readonly KeyEvent[];
  readonly final: KeyState;
  readonly explain: () => string;
}

const fail = (subject: Pick<Subject, 'explain'>, what: string): never => {
  throw new Error(`${what}\n${subject.explain()}`);
};

/** The handoffs open at the end are exactly the key state's holders (a limit key's guests too), with their leases. */
const openAreTheHolders = (subject: Subject, handoffs: readonly Handoff[]): void => {
  const open = handoffs.filter((h) => h.reason === null).map((h) => ({ jobId: h.jobId, leaseId: h.leaseId, acquiredAt: h.acquiredAt, workerId: h.workerId, home: h.home }));
  const held = holders(subject.final).map((j) => ({ jobId: j.jobId, leaseId: j.lease!.leaseId, acquiredAt: j.lease!.acquiredAt, workerId: j.lease!.workerId, home: j.home && auditKeyOf(j.home) }));
  const byJob = (a: { jobId: string }, b: { jobId: string }) => a.jobId.localeCompare(b.jobId);
  try {
    expect(open.sort(byJob)).toEqual(held.sort(byJob));
  } catch (e) {
    fail(subject, `open handoffs are not the holders: ${(e as Error).message}`);
  }
};

/**
 * Every admission (a guest's LimitHeld too) is one handoff; a closed one has a reason, a time and
 * a revision after its admission, and a handoff of the key's own job says who or what when its
 * reason calls for it (a guest's who and what are at its home).
 */
const closedHaveReasons = (subject: Subject, handoffs: readonly Handoff[]): void => {
  const admissions = subject.events.filter((e) => e.type === 'SlotAcquired' || e.type === 'JobPromoted' || e.type === 'LimitHeld').length;
  if (handoffs.length !== admissions) fail(subject, `${handoffs.length} handoffs for ${admissions} admissions`);
  for (const h of handoffs) {
    const closedFields = [h.releasedAt, h.releasedRevision, h.reason].filter((f) => f !== null).length;
    if (closedFields !== 0 && closedFields !== 3) fail(subject, `handoff ${h.leaseId} is half closed: ${JSON.stringify(h)}`);
    if (h.releasedRevision !== null && h.releasedRevision <= h.acquiredRevision) fail(subject, `handoff ${h.leaseId} released before it was acquired`);
    if ((h.how === 'promoted') !== (h.parkedMs !== null) || (h.parkedMs ?? 0) < 0) fail(subject, `handoff ${h.leaseId}: how ${h.how} with parkedMs ${h.parkedMs}`);
    if (h.home !== undefined) {
      if (h.limits === undefined || !h.limits.includes(h.key)) fail(subject, `guest handoff ${h.leaseId} of ${h.home} does not name ${h.key} among its limits`);
      continue;
    }
    if ((h.reason === 'revoked' || h.reason === 'cancelled') && h.by === null) fail(subject, `handoff ${h.leaseId} ${h.reason} by nobody`);
    if (h.reason === 'failed' && h.error === null) fail(subject, `handoff ${h.leaseId} failed without an error`);
    if ((h.reason === 'completed' || h.reason === 'failed') && h.attempt === null) fail(subject, `handoff ${h.leaseId} ${h.reason} without an attempt`);
  }
};

/**
 * At no revision do more handoffs overlap than the key's limit then (guests count like the key's
 * own jobs). A lowered limit preempts no one, so the count may stay above it for a while, but only
 * by releases: never by an admission.
 */
const overlapWithinLimit = (subject: Subject, handoffs: readonly Handoff[]): void => {
  const delta = new Array<number>(subject.events.length).fill(0);
  for (const h of handoffs) {
    delta[h.acquiredRevision]! += 1;
    if (h.releasedRevision !== null) delta[h.releasedRevision]! -= 1;
  }
  let limit = 0;
  let overlap = 0;
  subject.events.forEach((event, revision) => {
    if (event.type === 'KeyLimitSet') limit = event.data.limit;
    const before = overlap;
    overlap += delta[revision]!;
    if (overlap > limit && overlap > before) fail(subject, `at revision ${revision} (${event.type}) ${overlap} handoffs overlap on a limit of ${limit}`);
  });
};

const checkAudit = (key: string, subject: Subject): Handoff[] => {
  const handoffs = handoffsOf(key, revisioned(subject.events));
  openAreTheHolders(subject, handoffs);
  closedHaveReasons(subject, handoffs);
  overlapWithinLimit(subject, handoffs);
  return handoffs;
};

describe('handoffsOf over random command sequences', () => {
  it('open handoffs are the holders, every closed one has a reason, and no admission takes the overlap above the limit', () => {
    fc.assert(
      fc.property(scenarioArb(), (scenario) => {
        const trace = runScenario(scenario);
        checkAudit('k', { events: trace.events, final: trace.final, explain: () => `sequence:\n${describeTrace(trace)}` });
      }),
      { numRuns: 1_000 },
    );
  }, 60_000);
});

// Several keys at once: jobs of the homes a, b and t, each under further limits among t and u
// (t is a home and a limit key), driven through decideAll as the key writer drives decideAcross.

const HOMES = ['a', 'b', 't'] as const;
const LIMIT_KEYS = ['t', 'u'] as const;
const KEYS = ['a', 'b', 't', 'u'] as const;

type MultiIntent = { readonly dt: number } & (
  | { readonly kind: 'enqueue'; readonly home: number; readonly limits: readonly boolean[]; readonly limitOf: number | null; readonly priority: number; readonly delay: number | null; readonly maxAttempts: number; readonly whenFull: 'reject' | 'replace' | null }
  | { readonly kind: 'lease'; readonly home: number; readonly op: 'Complete' | 'Fail' | 'Yield' | 'Start'; readonly pick: number }
  | { readonly kind: 'admitDue' | 'resume'; readonly key: number }
  | { readonly kind: 'expire' | 'pause' | 'discard'; readonly key: number }
  | { readonly kind: 'setLimit'; readonly key: number; readonly limit: number }
  | { readonly kind: 'revoke'; readonly key: number; readonly pick: number | null }
  | { readonly kind: 'cancel'; readonly pick: number }
);

const keyArb = fc.nat({ max: KEYS.length - 1 });
const multiIntentArb: fc.Arbitrary<MultiIntent> = fc
  .tuple(
    fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3_000 }), fc.integer({ min: 3_000, max: 3_600_000 })),
    fc.oneof(
      { weight: 8, arbitrary: fc.record({ kind: fc.constant('enqueue' as const), home: fc.nat({ max: HOMES.length - 1 }), limits: fc.array(fc.boolean(), { minLength: 2, maxLength: 2 }), limitOf: fc.option(fc.integer({ min: 1, max: 3 })), priority: fc.integer({ min: -1, max: 2 }), delay: fc.option(fc.integer({ min: -1_000, max: 20_000 }), { freq: 4 }), maxAttempts: fc.integer({ min: 1, max: 3 }), whenFull: fc.constantFrom(null, null, null, 'reject' as const, 'replace' as const) }) },
      { weight: 10, arbitrary: fc.record({ kind: fc.constant('lease' as const), home: fc.nat({ max: HOMES.length - 1 }), op: fc.constantFrom('Start' as const, 'Start' as const, 'Complete' as const, 'Fail' as const, 'Yield' as const), pick: fc.nat({ max: 100 }) }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constantFrom('admitDue' as const, 'expire' as const), key: keyArb }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom('pause' as const, 'resume' as const, 'discard' as const), key: keyArb }) },
      { weight: 2, arbitrary: fc.record({ kind: fc.constant('setLimit' as const), key: keyArb, limit: fc.integer({ min: 1, max: 3 }) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('revoke' as const), key: keyArb, pick: fc.option(fc.nat({ max: 100 })) }) },
      { weight: 1, arbitrary: fc.record({ kind: fc.constant('cancel' as const), pick: fc.nat({ max: 100 }) }) },
    ),
  )
  .map(([dt, rest]) => ({ dt, ...rest }) as MultiIntent);

const nth = <A>(xs: readonly A[], n: number): A | undefined => (xs.length === 0 ? undefined : xs[n % xs.length]);

/** The command an intent means on the streams' current states, and the stream it is decided on. */
const multiCommand = (intent: MultiIntent, states: ReadonlyMap<string, KeyState>, now: number, jobs: Map<string, string>): [string, Command] => {
  const stateOf = (key: string) => states.get(keyStream(key)) ?? initialKeyState;
  switch (intent.kind) {
    case 'enqueue': {
      const home = HOMES[intent.home]!;
      const jobId = `j${jobs.size}`;
      jobs.set(jobId, home);
      const limits = LIMIT_KEYS.filter((k, i) => intent.limits[i] && k !== home).map((key) => ({ key, ...(intent.limitOf === null ? {} : { limit: intent.limitOf }) }));
      const spec = job(jobId, { priority: intent.priority, maxAttempts: intent.maxAttempts, runAt: intent.delay === null ? null : now + intent.delay, ...(limits.length > 0 ? { limits } : {}), ...(intent.whenFull === null ? {} : { whenFull: intent.whenFull }) });
      return [keyStream(home), { type: 'Enqueue', ...(intent.limitOf === null ? {} : { limit: intent.limitOf }), job: spec }];
    }
    case 'lease': {
      const home = HOMES[intent.home]!;
      const own = holders(stateOf(home)).filter((j) => j.home === undefined).sort((x, y) => x.seq - y.seq);
      const startable = own.filter((j) => j.lease!.workerId === null);
      const pool = intent.op === 'Start' ? startable : own.filter((j) => j.lease!.workerId !== null);
      const holder = nth(pool, intent.pick) ?? nth(own, intent.pick);
      if (holder === undefined) return [keyStream(home), { type: 'AdmitDue' }];
      const ids = { jobId: holder.jobId, leaseId: holder.lease!.leaseId };
      if (holder.lease!.workerId === null) return [keyStream(home), { type: 'Start', ...ids, workerId: 'w1' }];
      switch (intent.op) {
        case 'Fail':
          return [keyStream(home), { type: 'Fail', ...ids, error: 'boom', jitter: 0.5 }];
        case 'Yield':
          return [keyStream(home), { type: 'Yield', ...ids }];
        default:
          return [keyStream(home), { type: 'Complete', ...ids }];
      }
    }
    case 'admitDue':
      return [keyStream(KEYS[intent.key]!), { type: 'AdmitDue' }];
    case 'expire':
      return [keyStream(KEYS[intent.key]!), { type: 'ExpireLeases', jitter: 0.5 }];
    case 'pause':
      return [keyStream(KEYS[intent.key]!), { type: 'PauseKey', by: 'ops' }];
    case 'resume':
      return [keyStream(KEYS[intent.key]!), { type: 'ResumeKey', by: 'ops' }];
    case 'discard':
      return [keyStream(KEYS[intent.key]!), { type: 'DiscardParked', by: 'ops' }];
    case 'setLimit':
      return [keyStream(KEYS[intent.key]!), { type: 'SetLimit', limit: intent.limit, by: 'ops' }];
    case 'revoke': {
      const key = KEYS[intent.key]!;
      const own = holders(stateOf(key)).filter((j) => j.home === undefined);
      const target = intent.pick === null ? undefined : nth(own, intent.pick);
      return [keyStream(key), { type: 'RevokeLease', by: 'ops', jitter: 0.5, ...(target === undefined ? {} : { jobId: target.jobId }) }];
    }
    case 'cancel': {
      const jobId = nth([...jobs.keys()], intent.pick) ?? 'ghost';
      return [keyStream(jobs.get(jobId) ?? 'a'), { type: 'Cancel', jobId, by: 'ops' }];
    }
  }
};

interface MultiTrace {
  readonly events: ReadonlyMap<string, readonly KeyEvent[]>;
  readonly states: ReadonlyMap<string, KeyState>;
  readonly log: readonly string[];
}

/** Decides each intent over every stream it touches; what a decision leaves for later (fillLater) is served next, as the key writer does. */
const runAcross = (intents: readonly MultiIntent[]): MultiTrace => {
  const states = new Map<string, KeyState>();
  const events = new Map<string, KeyEvent[]>();
  const jobs = new Map<string, string>();
  const log: string[] = [];
  let now = T0;
  const decideOn = (stream: string, command: Command): void => {
    const outcome = decideAll(command, stream, states, now);
    if (outcome.tag === 'needs') throw new Error(`${command.type} on ${stream} needs ${outcome.streams.join(', ')}: decideAll has every stream`);
    if (E.isLeft(outcome.result)) {
      log.push(`  ${stream} ${JSON.stringify(command)} -> Left ${outcome.result.left.tag}`);
      return;
    }
    const decided = outcome.result.right;
    log.push(`  ${stream} ${JSON.stringify(command)} -> ${[...decided].map(([s, es]) => `${s}: [${es.map((e) => e.type).join(', ')}]`).join('; ')}`);
    for (const [s, es] of decided) {
      events.set(s, [...(events.get(s) ?? []), ...es]);
      states.set(s, fold(states.get(s) ?? initialKeyState, es));
    }
    for (const [s, { after }] of outcome.fillLater) decideOn(s, { type: 'FillSlots', ...(after === undefined ? {} : { after }) });
  };
  for (const intent of intents) {
    now += intent.dt;
    const [stream, command] = multiCommand(intent, states, now, jobs);
    decideOn(stream, command);
  }
  return { events, states, log };
};

describe('handoffsOf over random command sequences on several keys under shared limits', () => {
  it("each key's audit (its guests too) keeps the properties above, and a limit key's guest handoffs are their homes' leases", () => {
    fc.assert(
      fc.property(fc.array(multiIntentArb, { maxLength: 40, size: 'max' }), (intents) => {
        const trace = runAcross(intents);
        const explain = () => `sequence:\n${trace.log.join('\n')}`;
        const audits = new Map<string, Handoff[]>();
        for (const [stream, events] of trace.events) {
          const key = auditKeyOf(stream);
          audits.set(key, checkAudit(key, { events, final: trace.states.get(stream)!, explain }));
        }
        const byLease = (key: string, leaseId: string) => audits.get(key)?.find((h) => h.leaseId === leaseId);
        for (const [key, handoffs] of audits) {
          for (const h of handoffs) {
            if (h.home !== undefined) {
              // A guest's tenure is its home's lease: taken at once (after the same wait) and let go at once, for the same reason.
              const home = byLease(h.home, h.leaseId);
              const same = home !== undefined && (['jobId', 'how', 'parkedMs', 'acquiredAt', 'releasedAt', 'reason'] as const).every((f) => home[f] === h[f]);
              if (!same || !(home.limits ?? []).includes(key)) fail({ explain }, `guest handoff ${h.leaseId} on ${key} is not its home's: ${JSON.stringify([h, home])}`);
            } else {
              // Every further limit of a home lease holds a slot under it.
              for (const limit of h.limits ?? []) {
                const guest = byLease(limit, h.leaseId);
                if (guest?.home !== key || guest.releasedAt !== h.releasedAt) fail({ explain }, `home handoff ${h.leaseId} of ${key} has no guest handoff on ${limit}: ${JSON.stringify([h, guest])}`);
              }
            }
          }
        }
      }),
      { numRuns: 500 },
    );
  }, 60_000);
});

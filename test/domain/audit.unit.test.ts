import fc from 'fast-check';
import * as E from 'fp-ts/lib/Either.js';
import { describe, expect, it } from 'vitest';
import { handoffsOf, type Handoff, type RevisionedEvent } from '../../src/domain/audit.js';
import type { Command } from '../../src/domain/commands.js';
import { decide } from '../../src/domain/decide/index.js';
import type { KeyEvent } from '../../src/domain/events.js';
import { fold, holders, initialKeyState } from '../../src/domain/key-state.js';
import { describeTrace, runScenario, scenarioArb, type Trace } from './arbitraries.js';
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
      [{ type: 'RevokeLease', by: 'alice', jitter: 0, jobId: 'a' }, T0 + 2 * SEC], // 4 LeaseRevoked, 5 SlotReleased, 6 JobScheduled
      [{ type: 'AdmitDue' }, T0 + 3_600 * SEC], // 7 SlotAcquired a:2
      [startCmd('a', 'a:2', 'w2'), T0 + 3_601 * SEC], // 8
    );
    expect(handoffsOf('k', events)).toEqual([
      handoff({ jobId: 'a', leaseId: 'a:1', acquiredAt: T0, acquiredRevision: 2, attempt: 1, workerId: 'w1', startedAt: T0 + SEC, releasedAt: T0 + 2 * SEC, reason: 'revoked', by: 'alice', releasedRevision: 5 }),
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
// Over random command sequences

const revisioned = (events: readonly KeyEvent[]): RevisionedEvent[] => events.map((event, revision) => ({ revision, event }));

const fail = (trace: Trace, what: string): never => {
  throw new Error(`${what}\nsequence:\n${describeTrace(trace)}`);
};

/** The handoffs open at the end are exactly the key state's holders, with their leases. */
const openAreTheHolders = (trace: Trace, handoffs: readonly Handoff[]): void => {
  const open = handoffs.filter((h) => h.reason === null).map((h) => ({ jobId: h.jobId, leaseId: h.leaseId, acquiredAt: h.acquiredAt, workerId: h.workerId }));
  const held = holders(trace.final).map((j) => ({ jobId: j.jobId, leaseId: j.lease!.leaseId, acquiredAt: j.lease!.acquiredAt, workerId: j.lease!.workerId }));
  const byJob = (a: { jobId: string }, b: { jobId: string }) => a.jobId.localeCompare(b.jobId);
  try {
    expect(open.sort(byJob)).toEqual(held.sort(byJob));
  } catch (e) {
    fail(trace, `open handoffs are not the holders: ${(e as Error).message}`);
  }
};

/** Every admission is one handoff; a closed one has a reason, a time and a revision after its admission, and says who or what when its reason calls for it. */
const closedHaveReasons = (trace: Trace, handoffs: readonly Handoff[]): void => {
  const admissions = trace.events.filter((e) => e.type === 'SlotAcquired' || e.type === 'JobPromoted').length;
  if (handoffs.length !== admissions) fail(trace, `${handoffs.length} handoffs for ${admissions} admissions`);
  for (const h of handoffs) {
    const closedFields = [h.releasedAt, h.releasedRevision, h.reason].filter((f) => f !== null).length;
    if (closedFields !== 0 && closedFields !== 3) fail(trace, `handoff ${h.leaseId} is half closed: ${JSON.stringify(h)}`);
    if (h.releasedRevision !== null && h.releasedRevision <= h.acquiredRevision) fail(trace, `handoff ${h.leaseId} released before it was acquired`);
    if ((h.reason === 'revoked' || h.reason === 'cancelled') && h.by === null) fail(trace, `handoff ${h.leaseId} ${h.reason} by nobody`);
    if (h.reason === 'failed' && h.error === null) fail(trace, `handoff ${h.leaseId} failed without an error`);
    if ((h.reason === 'completed' || h.reason === 'failed') && h.attempt === null) fail(trace, `handoff ${h.leaseId} ${h.reason} without an attempt`);
    if ((h.how === 'promoted') !== (h.parkedMs !== null) || (h.parkedMs ?? 0) < 0) fail(trace, `handoff ${h.leaseId}: how ${h.how} with parkedMs ${h.parkedMs}`);
  }
};

/**
 * At no revision do more handoffs overlap than the key's limit then. A lowered limit preempts no
 * one, so the count may stay above it for a while, but only by releases: never by an admission.
 */
const overlapWithinLimit = (trace: Trace, handoffs: readonly Handoff[]): void => {
  const delta = new Array<number>(trace.events.length).fill(0);
  for (const h of handoffs) {
    delta[h.acquiredRevision]! += 1;
    if (h.releasedRevision !== null) delta[h.releasedRevision]! -= 1;
  }
  let limit = 0;
  let overlap = 0;
  trace.events.forEach((event, revision) => {
    if (event.type === 'KeyLimitSet') limit = event.data.limit;
    const before = overlap;
    overlap += delta[revision]!;
    if (overlap > limit && overlap > before) fail(trace, `at revision ${revision} (${event.type}) ${overlap} handoffs overlap on a limit of ${limit}`);
  });
};

describe('handoffsOf over random command sequences', () => {
  it('open handoffs are the holders, every closed one has a reason, and no admission takes the overlap above the limit', () => {
    fc.assert(
      fc.property(scenarioArb(), (scenario) => {
        const trace = runScenario(scenario);
        const handoffs = handoffsOf('k', revisioned(trace.events));
        openAreTheHolders(trace, handoffs);
        closedHaveReasons(trace, handoffs);
        overlapWithinLimit(trace, handoffs);
      }),
      { numRuns: 1_000 },
    );
  }, 60_000);
});

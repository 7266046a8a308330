import assert from 'node:assert/strict';
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import * as E from 'fp-ts/lib/Either.js';
import { describe, expect, it } from 'vitest';
import { decodeCommand, type Command } from '../../src/domain/commands.js';
import { decide, decideInto } from '../../src/domain/decide/index.js';
import { isDead } from '../../src/domain/key-state.js';
import { KeyEvent } from '../../src/domain/events.js';
import { Scratch, byPromotionOrder, fold, holders, initialKeyState, jobsIn, parkedInOrder, type Draft, type JobEntry, type KeyState, snapshotState } from '../../src/domain/key-state.js';
import {
  forEachEvent,
  jobIdOf,
  runScenario,
  scenarioArb,
  T0,
  violation,
  type RunOptions,
  type Step,
  type Trace,
} from './arbitraries.js';

// DESIGN.md "The key stream", invariants 1-7, each checked after every step (and, where it speaks
// of single events, after every event) of 1,000 random command sequences against one key, with a
// clock that moves by random amounts between commands (past leases, retries and schedules).

const NUM_RUNS = 1_000;
const TIMEOUT_MS = 60_000;

const check = (invariant: (trace: Trace) => void, options: RunOptions = {}): void =>
  fc.assert(
    fc.property(scenarioArb(), (scenario) => invariant(runScenario(scenario, options))),
    { numRuns: NUM_RUNS },
  );

const isAdmission = (e: KeyEvent): e is Extract<KeyEvent, { type: 'SlotAcquired' | 'JobPromoted' }> =>
  e.type === 'SlotAcquired' || e.type === 'JobPromoted';

const LEASE_COMMANDS = new Set(['Start', 'Renew', 'Complete', 'Fail', 'Yield']);
const FINISH_EVENTS = new Set(['JobCompleted', 'JobDead', 'JobCancelled', 'ParkedDiscarded', 'JobRejected', 'ParkedReplaced']);
const LEASE_EVENTS = new Set(['JobStarted', 'LeaseRenewed', 'JobCompleted', 'JobFailed', 'JobYielded', 'LeaseExpired', 'LeaseRevoked']);

const currentLease = (state: KeyState, jobId: string): string | null => state.jobs[jobId]?.lease?.leaseId ?? null;

const roundTrip = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

/** Promotion order from the ledger alone: priority as enqueued, then enqueue order. */
class EnqueueOrder {
  private readonly order = new Map<string, { readonly priority: number; readonly n: number }>();
  private arrivals = 0;

  /** A dead job retried arrives again: its place is at the back of the line. */
  see(event: KeyEvent): void {
    if (event.type === 'JobEnqueued' || event.type === 'JobRetried') this.order.set(event.data.jobId, { priority: event.data.priority, n: this.arrivals++ });
  }

  sort(jobIds: readonly string[]): string[] {
    const key = (id: string) => this.order.get(id) ?? { priority: Infinity, n: Infinity };
    return [...jobIds].sort((a, b) => key(a).priority - key(b).priority || key(a).n - key(b).n);
  }
}

const idsWithStatus = (state: KeyState, status: string): string[] =>
  Object.entries(state.jobs)
    .filter(([, j]) => j.status === status)
    .map(([id]) => id);

// ---------------------------------------------------------------------------------------------
// 1. holders ≤ limit after every admission

const holdersWithinLimitAfterEveryAdmission = (trace: Trace): void =>
  forEachEvent(trace, ({ step, event, after }) => {
    if (!isAdmission(event)) return;
    const n = holders(after).length;
    if (n > after.limit) violation(trace, step, `invariant 1: ${event.type}(${event.data.jobId}) left ${n} holders on a limit of ${after.limit}`);
  });

// 2. no idle capacity while jobs wait, unless an operator paused the key

const noIdleCapacityWhileJobsWait = (trace: Trace): void => {
  for (const step of trace.steps) {
    const parked = jobsIn(step.after, 'parked').length;
    const held = holders(step.after).length;
    if (parked > 0 && held < step.after.limit && step.after.paused === undefined) {
      violation(trace, step, `invariant 2: ${parked} job(s) parked while only ${held} of ${step.after.limit} slots are held`);
    }
  }
};

// 2b. a paused key admits no one

const pausedKeyAdmitsNoOne = (trace: Trace): void =>
  forEachEvent(trace, ({ step, event, before }) => {
    if (isAdmission(event) && before.paused !== undefined) violation(trace, step, `a paused key admitted ${event.data.jobId} (${event.type})`);
  });

// 2c. the full-key policy: a "reject" job never parks at its enqueue; after a "replace" job parks,
// no older parked job of its name is left

const fullKeyPolicy = (trace: Trace): void => {
  for (const step of trace.steps) {
    const c = step.command;
    if (c.type !== 'Enqueue' && c.type !== 'EnqueueMany') continue;
    const seen = new Set<string>();
    for (const job of c.type === 'Enqueue' ? [c.job] : c.jobs) {
      // A job already on the key (or met earlier in the batch) is skipped: its policy is the first one's.
      if (step.before.jobs[job.jobId] !== undefined || seen.has(job.jobId)) continue;
      seen.add(job.jobId);
      const parkedNow = step.events.some((e) => e.type === 'JobParked' && e.data.jobId === job.jobId);
      if (job.whenFull === 'reject' && parkedNow) violation(trace, step, `${job.jobId} (whenFull reject) parked`);
      // The last of its name in the batch is the one left parked: an earlier one it replaced is not.
      if (job.whenFull === 'replace' && parkedNow && step.after.jobs[job.jobId]?.status === 'parked') {
        const others = jobsIn(step.after, 'parked').filter((p) => p.jobId !== job.jobId && p.debounce === job.name);
        if (others.length > 0) violation(trace, step, `${job.jobId} (whenFull replace) parked beside ${others.map((o) => o.jobId).join(', ')} of its name`);
      }
    }
  }
};

// 3. promotion order

const promotionOrder = (trace: Trace): void => {
  const order = new EnqueueOrder();
  forEachEvent(
    trace,
    ({ step, event, before }) => {
      order.see(event);
      if (!isAdmission(event)) return;
      const parked = order.sort(idsWithStatus(before, 'parked'));
      if (event.type === 'JobPromoted' && parked[0] !== event.data.jobId) {
        violation(trace, step, `invariant 3: promoted ${event.data.jobId} while the first parked job in order was ${parked[0]} (parked: ${parked.join(', ')})`);
      }
      if (event.type === 'SlotAcquired' && parked.length > 0) {
        violation(trace, step, `invariant 3: ${event.data.jobId} took a slot directly, ahead of parked ${parked.join(', ')}`);
      }
    },
    (step) => {
      // AdmitDue takes every due scheduled job, in promotion order, each admitted or parked.
      if (step.command.type !== 'AdmitDue' || E.isLeft(step.result)) return;
      const due = order.sort(idsWithStatus(step.before, 'scheduled').filter((id) => (step.before.jobs[id]?.runAt ?? Infinity) <= step.now));
      const got = step.events.map((e) => `${e.type}(${jobIdOf(e)})`);
      const admittedOrParked = step.events.every((e) => e.type === 'SlotAcquired' || e.type === 'JobParked');
      const ids = step.events.map(jobIdOf);
      if (!admittedOrParked || ids.join() !== due.join()) {
        violation(trace, step, `invariant 3: AdmitDue should admit or park the due jobs [${due.join(', ')}] in that order, got [${got.join(', ')}]`);
      }
    },
  );
};

// 4. a lease is released at most once; fencing

const leaseReleasedAtMostOnce = (trace: Trace): void => {
  const issued = new Set<string>();
  const released = new Set<string>();
  forEachEvent(trace, ({ step, event, before }) => {
    const jobId = jobIdOf(event) ?? '';
    if (isAdmission(event)) {
      if (issued.has(event.data.leaseId)) violation(trace, step, `invariant 4: lease ${event.data.leaseId} issued twice`);
      issued.add(event.data.leaseId);
    }
    if (event.type === 'SlotReleased') {
      if (released.has(event.data.leaseId)) violation(trace, step, `invariant 4: lease ${event.data.leaseId} released twice`);
      released.add(event.data.leaseId);
    }
    if ((event.type === 'SlotReleased' || LEASE_EVENTS.has(event.type)) && 'leaseId' in event.data) {
      const current = currentLease(before, jobId);
      if (event.data.leaseId !== current) {
        violation(trace, step, `invariant 4: ${event.type}(${jobId}) under lease ${event.data.leaseId}, but the job's lease is ${current}`);
      }
    }
  });
  // Fencing: a stale lease changes nothing and says so.
  for (const step of trace.steps) {
    const c = step.command;
    if (!LEASE_COMMANDS.has(c.type) || !('leaseId' in c)) continue;
    const current = currentLease(step.before, c.jobId);
    if (c.leaseId === current) continue;
    const r = step.result;
    if (E.isRight(r) || r.left.tag !== 'StaleLease' || r.left.currentLeaseId !== current) {
      violation(
        trace,
        step,
        `invariant 4 (fencing): ${c.type} of ${c.jobId} under stale lease ${c.leaseId} (current: ${current}) must be refused as StaleLease, got ${JSON.stringify(E.isRight(r) ? r.right.map((e) => e.type) : r.left)}`,
      );
    }
  }
};

// 5. a job is in exactly one of scheduled / parked / holding / finished

const shapeProblem = (job: KeyState['jobs'][string]): string | undefined => {
  switch (job.status) {
    case 'scheduled':
      return job.lease === null && job.runAt !== null && job.parkedAt === null ? undefined : 'scheduled needs runAt, no lease, no parkedAt';
    case 'parked':
      return job.lease === null && job.runAt === null && job.parkedAt !== null ? undefined : 'parked needs parkedAt, no lease, no runAt';
    case 'holding':
      return job.lease !== null && job.runAt === null && job.parkedAt === null ? undefined : 'holding needs a lease, no runAt, no parkedAt';
    default:
      return `status ${job.status} is transient and must not outlive an append`;
  }
};

const exactlyOnePlace = (trace: Trace): void => {
  const active = new Set<string>();
  const finishedAt = new Map<string, number>();
  forEachEvent(
    trace,
    ({ step, event, before }) => {
      const jobId = jobIdOf(event);
      if (jobId === undefined) return;
      const finishedStep = finishedAt.get(jobId);
      // A dead job retried is on the key again, as a new arrival; one discarded leaves the dead list, and stays finished.
      if (event.type === 'JobRetried') finishedAt.delete(jobId);
      else if (event.type === 'DeadDiscarded') return;
      else if (finishedStep !== undefined) {
        // Only the release of the finished job's own slot may follow, in the same append.
        const ownRelease = event.type === 'SlotReleased' && finishedStep === step.index && before.jobs[jobId]?.status === 'finishing';
        if (!ownRelease) violation(trace, step, `invariant 5: job ${jobId} finished at step #${finishedStep}, then got ${event.type}`);
      }
      if (event.type === 'JobEnqueued' || event.type === 'JobRetried') {
        if (before.jobs[jobId] !== undefined) violation(trace, step, `invariant 5: job ${jobId} ${event.type === 'JobRetried' ? 'retried' : 'enqueued again'} while ${before.jobs[jobId]?.status}`);
        active.add(jobId);
      } else if (before.jobs[jobId] === undefined) {
        violation(trace, step, `invariant 5: ${event.type} for job ${jobId}, which is not on the key`);
      }
      if (FINISH_EVENTS.has(event.type)) {
        finishedAt.set(jobId, step.index);
        active.delete(jobId);
      }
    },
    (step) => {
      for (const [jobId, job] of Object.entries(step.after.jobs)) {
        const problem = shapeProblem(job);
        if (problem) violation(trace, step, `invariant 5: job ${jobId} is ${job.status}: ${problem} (${JSON.stringify(job)})`);
        if (!active.has(jobId)) violation(trace, step, `invariant 5: job ${jobId} is in the state but the ledger finished it or never enqueued it`);
      }
      for (const jobId of active) {
        if (step.after.jobs[jobId] === undefined) violation(trace, step, `invariant 5: job ${jobId} vanished from the state without a finishing event`);
      }
    },
  );
};

// 6. replay determinism

const sameValue = (trace: Trace, step: Step, what: string, actual: unknown, expected: unknown): void => {
  try {
    assert.deepStrictEqual(actual, expected);
  } catch (e) {
    violation(trace, step, `invariant 6: ${what}\n${(e as Error).message}`);
  }
};

const replayDeterminism = (trace: Trace): void => {
  const last = trace.steps[trace.steps.length - 1];
  if (last === undefined) return;
  sameValue(trace, last, 'folding the history from scratch differs from the incremental state', fold(initialKeyState, trace.events), trace.final);
  const stored = roundTrip(trace.events);
  stored.forEach((e, i) => {
    if (E.isLeft(KeyEvent.decode(e))) violation(trace, last, `invariant 6: stored event #${i} (${e.type}) does not decode`);
  });
  sameValue(trace, last, 'folding the JSON-stored history differs from the incremental state', fold(initialKeyState, stored), trace.final);
  let offset = 0;
  for (const step of trace.steps) {
    // A snapshot of the state before this step, as the command layer would load it.
    const snapshot = snapshotState(roundTrip(step.before));
    if (snapshot === undefined) return violation(trace, step, 'invariant 6: a JSON snapshot of the state is refused by snapshotState');
    sameValue(trace, step, 'the state does not survive a JSON snapshot round trip', snapshot, step.before);
    sameValue(trace, step, 'deciding on the snapshot differs from deciding on the live state', decide(step.command, snapshot, step.now), step.result);
    if (step.index % 5 === 0) {
      sameValue(trace, step, 'snapshot + stored delta differs from the incremental state', fold(snapshot, stored.slice(offset)), trace.final);
    }
    offset += step.events.length;
  }
};

// 7. a refused admission costs no attempt; a parked job keeps its priority and any remaining delay

interface JobHistory {
  readonly priority: number;
  readonly maxAttempts: number;
  seq: number | null;
  starts: number;
  /** Yields of started leases: they hand the attempt back. */
  yields: number;
  /** The job may be neither admitted nor parked before this time (its schedule or retry). */
  notBefore: number;
  /** Reclaimed before it started: it must wait in line again (parked), not be retried or die. */
  reclaimedUnstarted: boolean;
  /** A JobFailed's retryAt (null: dead), or a given-back JobYielded's, which the job's next placement must honour. */
  promisedRetryAt: { readonly by: 'JobFailed' | 'JobYielded'; readonly at: number | null } | undefined;
}

const attemptsAndDelays = (trace: Trace): void => {
  const jobs = new Map<string, JobHistory>();
  forEachEvent(
    trace,
    ({ step, event, before, after }) => {
      const jobId = jobIdOf(event);
      if (jobId === undefined) return;
      const at = event.data.at;
      if (event.type === 'JobEnqueued') {
        const { priority, maxAttempts, runAt } = event.data;
        jobs.set(jobId, { priority, maxAttempts, seq: null, starts: 0, yields: 0, notBefore: runAt !== null && runAt > at ? runAt : -Infinity, reclaimedUnstarted: false, promisedRetryAt: undefined });
      }
      // A retry is a new life: a fresh set of attempts and a new place in line, due at once.
      if (event.type === 'JobRetried') {
        const { priority, maxAttempts } = event.data;
        jobs.set(jobId, { priority, maxAttempts, seq: null, starts: 0, yields: 0, notBefore: -Infinity, reclaimedUnstarted: false, promisedRetryAt: undefined });
      }
      const h = jobs.get(jobId);
      if (h === undefined) return violation(trace, step, `invariant 7: ${event.type} for job ${jobId} that was never enqueued`);
      const b = before.jobs[jobId];
      const a = after.jobs[jobId];
      const wasStarted = b?.lease?.workerId != null;
      if (b !== undefined && a !== undefined) {
        const expected = event.type === 'JobStarted' ? 1 : event.type === 'JobYielded' && wasStarted ? -1 : 0;
        if (a.attempts - b.attempts !== expected) {
          violation(trace, step, `invariant 7: ${event.type}(${jobId}) moved attempts ${b.attempts} -> ${a.attempts} (only a start counts one, only a yield of a started run hands it back)`);
        }
      }
      switch (event.type) {
        case 'JobStarted':
          h.starts += 1;
          if (event.data.attempt !== h.starts - h.yields) {
            violation(trace, step, `invariant 7: JobStarted(${jobId}).attempt is ${event.data.attempt}, but the ledger shows ${h.starts - 1} prior starts and ${h.yields} yields`);
          }
          if (event.data.attempt > h.maxAttempts) violation(trace, step, `invariant 7: ${jobId} started attempt ${event.data.attempt} of ${h.maxAttempts}`);
          break;
        case 'JobYielded':
          if (wasStarted) h.yields += 1;
          break;
        case 'JobScheduled':
          h.notBefore = event.data.runAt;
          break;
        case 'LeaseExpired':
        case 'LeaseRevoked':
          h.reclaimedUnstarted = !wasStarted;
          break;
        case 'JobDead':
          // Dead with attempts left only when no worker knows it: a give-back past its bound (a Yield), attempts untouched.
          if (step.command.type === 'Yield' && event.data.reason.startsWith('no worker knows')) break;
          if (h.starts - h.yields !== h.maxAttempts) {
            violation(trace, step, `invariant 7: ${jobId} is dead after ${h.starts - h.yields} counted attempts of ${h.maxAttempts}`);
          }
          break;
      }
      if ((isAdmission(event) || event.type === 'JobParked') && at < h.notBefore) {
        violation(trace, step, `invariant 7: ${event.type}(${jobId}) at ${at}, before its run time ${h.notBefore} (${h.notBefore - at} ms early)`);
      }
      if (event.type === 'JobFailed') h.promisedRetryAt = { by: event.type, at: event.data.retryAt };
      else if (event.type === 'JobYielded' && event.data.retryAt !== undefined) h.promisedRetryAt = { by: event.type, at: event.data.retryAt };
      else if (h.promisedRetryAt !== undefined && (event.type === 'JobParked' || event.type === 'JobScheduled' || event.type === 'JobDead')) {
        const placed = event.type === 'JobScheduled' ? `JobScheduled at ${event.data.runAt}` : event.type;
        const promised = h.promisedRetryAt.at === null ? 'JobDead' : `JobScheduled at ${h.promisedRetryAt.at}`;
        const by = h.promisedRetryAt.by;
        h.promisedRetryAt = undefined;
        if (placed !== promised) violation(trace, step, `invariant 7: ${jobId} got ${by} with a retry promised as ${promised}, then got ${placed}`);
      }
      if (h.reclaimedUnstarted && (event.type === 'JobParked' || event.type === 'JobScheduled' || event.type === 'JobDead')) {
        h.reclaimedUnstarted = false;
        if (event.type !== 'JobParked') {
          violation(trace, step, `invariant 7: ${jobId} lost a slot it never started, and then got ${event.type} instead of waiting in line again (JobParked)`);
        }
      }
    },
    (step) => {
      for (const [jobId, job] of Object.entries(step.after.jobs)) {
        const h = jobs.get(jobId);
        if (h === undefined) return violation(trace, step, `invariant 7: ${jobId} is in the state but was never enqueued`);
        h.seq ??= job.seq;
        if (job.priority !== h.priority) violation(trace, step, `invariant 7: ${jobId}'s priority changed from ${h.priority} to ${job.priority}`);
        if (job.seq !== h.seq) violation(trace, step, `invariant 7: ${jobId}'s place in line (seq) changed from ${h.seq} to ${job.seq}`);
        if (job.maxAttempts !== h.maxAttempts) violation(trace, step, `invariant 7: ${jobId}'s maxAttempts changed`);
        if (job.attempts < 0 || job.attempts > job.maxAttempts) violation(trace, step, `invariant 7: ${jobId} has ${job.attempts} attempts of ${job.maxAttempts}`);
        if (job.attempts !== h.starts - h.yields) violation(trace, step, `invariant 7: ${jobId} has ${job.attempts} attempts, the ledger counts ${h.starts - h.yields}`);
        if (job.status === 'scheduled' && job.runAt !== h.notBefore) {
          violation(trace, step, `invariant 7: scheduled ${jobId} now runs at ${job.runAt}, not at ${h.notBefore} as recorded`);
        }
      }
    },
  );
};

// ---------------------------------------------------------------------------------------------
// Beyond the seven

const RELEASE_REASON: Partial<Record<Command['type'], string>> = {
  Complete: 'completed',
  Fail: 'failed',
  Yield: 'yielded',
  ExpireLeases: 'expired',
  RevokeLease: 'revoked',
  Cancel: 'cancelled',
};

/**
 * Invariant 8 (issue 21 #1): a started lease's slot is released only when its handler ended
 * (Complete, Fail, Yield or Stopped under that lease) or when the lease lapsed (ExpireLeases,
 * past its expiry): never by an operator's Cancel or RevokeLease, which revoke it instead, unless
 * the operator forces it (RevokeLease force: no handler runs, its worker is gone).
 */
const startedSlotsEndOnlyWithTheirHandler = (trace: Trace): void => {
  for (const step of trace.steps) {
    const { command: c, before } = step;
    for (const e of step.events) {
      if (e.type !== 'SlotReleased') continue;
      const lease = before.jobs[e.data.jobId]?.lease;
      if (lease?.leaseId !== e.data.leaseId || lease.workerId === null) continue;
      const byItsHandler = (c.type === 'Complete' || c.type === 'Fail' || c.type === 'Yield' || c.type === 'Stopped') && c.jobId === e.data.jobId && c.leaseId === e.data.leaseId;
      const lapsed = c.type === 'ExpireLeases' && lease.expiresAt !== null && lease.expiresAt <= step.now;
      const forced = c.type === 'RevokeLease' && c.force === true && step.events.some((r) => r.type === 'LeaseRevoked' && r.data.leaseId === e.data.leaseId && r.data.force === true);
      if (!byItsHandler && !lapsed && !forced) violation(trace, step, `${c.type} released the started lease ${e.data.leaseId} of ${e.data.jobId}, whose handler may still run`);
    }
  }
};

/** Every command the generator makes is accepted by the codecs, decide never throws, and refuses exactly what it must. */
const decisionsAreTotalAndRefuseOnlyWhatTheyMust = (trace: Trace): void => {
  for (const step of trace.steps) {
    const { command: c, before, result } = step;
    const job = 'jobId' in c && c.jobId !== undefined ? before.jobs[c.jobId] : undefined;
    let expected: string | null = null; // null: accepted
    switch (c.type) {
      case 'Start':
        expected = c.leaseId !== job?.lease?.leaseId ? 'StaleLease' : job.lease.workerId !== null ? 'AlreadyStarted' : null;
        break;
      case 'Complete':
      case 'Fail':
        expected = c.leaseId !== job?.lease?.leaseId ? 'StaleLease' : job.lease.workerId === null ? 'NotStarted' : null;
        break;
      case 'Renew':
        expected = c.leaseId !== job?.lease?.leaseId ? 'StaleLease' : job.lease.revoked !== undefined ? 'LeaseRevoked' : null;
        break;
      case 'Yield':
        expected = c.leaseId !== job?.lease?.leaseId ? 'StaleLease' : null;
        break;
      case 'Stopped':
        expected = c.leaseId !== job?.lease?.leaseId ? 'StaleLease' : job.lease.revoked === undefined ? 'NotRevoked' : null;
        break;
      case 'Cancel':
        expected = job === undefined ? 'JobNotFound' : null;
        break;
      case 'RetryJob':
      case 'DiscardDead':
        // Invariant (issue 21 #5): only the key's dead jobs; a retry and a discard of one exclude each other.
        expected = isDead(before, c.jobId) ? null : 'NotDead';
        break;
      case 'RevokeLease':
        expected = c.jobId !== undefined && job?.lease == null ? 'NotHolding' : null;
        break;
      case 'PauseKey':
        expected = before.paused !== undefined ? 'AlreadyPaused' : null;
        break;
      case 'ResumeKey':
        expected = before.paused === undefined ? 'NotPaused' : null;
        break;
      case 'DiscardParked': {
        const notParked = (c.jobIds ?? []).filter((id) => before.jobs[id]?.status !== 'parked');
        expected = notParked.length > 0 ? 'NotParked' : null;
        if (E.isLeft(result) && result.left.tag === 'NotParked' && result.left.jobIds.join() !== notParked.join()) {
          violation(trace, step, `NotParked names [${result.left.jobIds.join(', ')}], not the jobs that are not parked [${notParked.join(', ')}]`);
        }
        break;
      }
      case 'Enqueue':
      case 'EnqueueMany':
        // A key's limit is stable: only an enqueue that owns it may name another.
        expected = c.solo !== true && before.limit > 0 && c.limit !== undefined && c.limit !== before.limit && c.ownsLimit !== true ? 'LimitMismatch' : null;
        break;
      default:
        expected = null;
    }
    const got = E.isLeft(result) ? result.left.tag : null;
    if (got !== expected) violation(trace, step, `${c.type} should be ${expected === null ? 'accepted' : `refused as ${expected}`}, got ${got ?? 'accepted'}`);
    if (E.isLeft(result) && step.after !== before) violation(trace, step, 'a refusal changed the state');
    if (E.isLeft(result)) continue;
    // Only a holder's own command, the sweeper, an operator's revoke or a cancel frees a slot; a
    // lowered limit preempts no one, and only silence (ExpireLeases) expires a lease.
    for (const e of step.events) {
      // The worker's word that a revoked lease's handler stopped releases it as revoked, or as cancelled if the revocation cancels the job.
      // (a forced release of a running job whose cancel was pending, as cancelled).
      const pendingCancel = before.jobs[e.type === 'SlotReleased' ? e.data.jobId : '']?.lease?.revoked?.cancel === true;
      const reason = c.type === 'Stopped' || c.type === 'RevokeLease' ? (pendingCancel ? 'cancelled' : 'revoked') : RELEASE_REASON[c.type];
      if (e.type === 'SlotReleased' && e.data.reason !== reason) violation(trace, step, `${c.type} released ${e.data.jobId}'s slot as '${e.data.reason}'`);
      if (e.type === 'LeaseExpired' && c.type !== 'ExpireLeases') violation(trace, step, `${c.type} expired ${e.data.jobId}'s lease`);
      if (e.type === 'LeaseRevoked' && c.type !== 'RevokeLease' && !(c.type === 'Cancel' && e.data.cancel === true)) violation(trace, step, `${c.type} revoked ${e.data.jobId}'s lease`);
    }
    // An accepted operator command does what it says, as events.
    if (c.type === 'DiscardParked') {
      const wanted = c.jobIds === undefined ? idsWithStatus(before, 'parked') : [...new Set(c.jobIds)];
      const discarded = step.events.filter((e) => e.type === 'ParkedDiscarded').map(jobIdOf);
      if (discarded.slice().sort().join() !== wanted.sort().join()) {
        violation(trace, step, `DiscardParked should discard [${wanted.join(', ')}], recorded [${discarded.join(', ')}]`);
      }
    }
    // A running job's cancel revokes its lease (once): it is cancelled when its handler stopped.
    const running = before.jobs[c.type === 'Cancel' ? c.jobId : '']?.lease;
    const cancelRecorded = (e: KeyEvent) => (running?.workerId != null ? e.type === 'LeaseRevoked' && e.data.cancel === true : e.type === 'JobCancelled') && (e.data as { jobId?: string }).jobId === (c as { jobId: string }).jobId;
    if (c.type === 'Cancel' && running?.revoked?.cancel !== true && !step.events.some(cancelRecorded)) {
      violation(trace, step, `Cancel of ${c.jobId} recorded no ${running?.workerId != null ? 'LeaseRevoked (cancel)' : 'JobCancelled'}`);
    }
  }
};

/** A retried job is admitted like an arrival: never over the limit, never ahead of the line, with no attempt used. */
const retryIsAnArrival = (trace: Trace): void => {
  for (const step of trace.steps) {
    const c = step.command;
    if (c.type !== 'RetryJob' || E.isLeft(step.result)) continue;
    const job = step.after.jobs[c.jobId];
    const admitted = step.events.some((e) => e.type === 'SlotAcquired');
    if (job === undefined || job.attempts !== 0) violation(trace, step, `retried ${c.jobId} is ${JSON.stringify(job)}, not back with a fresh set of attempts`);
    if (admitted && holders(step.after).length > step.after.limit) violation(trace, step, `retry of ${c.jobId} left ${holders(step.after).length} holders on a limit of ${step.after.limit}`);
    if (admitted && (jobsIn(step.before, 'parked').length > 0 || step.before.paused !== undefined)) violation(trace, step, `retry of ${c.jobId} took a slot ahead of the line or on a paused key`);
    if (!admitted && job?.status !== 'parked') violation(trace, step, `retry of ${c.jobId} neither took a slot nor parked`);
  }
};

/** A started lease that ran out by `now`; an admission nobody started never expires. */
const lapsed = (h: JobEntry, now: number): boolean => h.lease?.workerId != null && h.lease.expiresAt !== null && h.lease.expiresAt <= now;

/**
 * The sweeper frees every expired holder at once (solid_queue #502) and never a live one
 * (solid_queue #689), nor an admission no worker has started yet (it holds its slot until read).
 */
const sweeperReclaimsExactlyTheExpired = (trace: Trace): void => {
  for (const step of trace.steps) {
    if (step.command.type !== 'ExpireLeases' || E.isLeft(step.result)) continue;
    const expired = holders(step.before).filter((h) => lapsed(h, step.now));
    const reclaimed = step.events.filter((e) => e.type === 'LeaseExpired').map(jobIdOf);
    if (reclaimed.slice().sort().join() !== expired.map((h) => h.jobId).sort().join()) {
      violation(trace, step, `ExpireLeases at ${step.now} reclaimed [${reclaimed.join(', ')}], expired holders were [${expired.map((h) => h.jobId).join(', ')}]`);
    }
    for (const h of holders(step.after)) {
      if (lapsed(h, step.now)) violation(trace, step, `${h.jobId} still holds a lease that expired at ${h.lease!.expiresAt}`);
    }
  }
};

/**
 * Direct handoff (Complete/Fail with handOffTo) starts exactly the first job the decision promoted
 * onto the worker's queue, for that worker, and nothing else; without handOffTo they start nothing.
 */
const handoffStartsOnlyWhatItPromoted = (trace: Trace): void => {
  for (const step of trace.steps) {
    const c = step.command;
    if ((c.type !== 'Complete' && c.type !== 'Fail') || E.isLeft(step.result)) continue;
    const starts = step.events.filter((e) => e.type === 'JobStarted');
    const promoted = step.events.flatMap((e) => (e.type === 'JobPromoted' ? [e.data] : []));
    const expected = c.handOffTo === undefined ? undefined : promoted.find((p) => step.before.jobs[p.jobId]?.queue === c.handOffTo!.queue);
    const actual = starts.map((e) => (e.type === 'JobStarted' ? `${e.data.jobId}/${e.data.leaseId}/${e.data.workerId}` : ''));
    const wanted = expected === undefined ? [] : [`${expected.jobId}/${expected.leaseId}/${c.handOffTo!.workerId}`];
    if (actual.join() !== wanted.join()) violation(trace, step, `${c.type} started [${actual.join(', ')}], expected [${wanted.join(', ')}]`);
  }
};

const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x)) as T;

/**
 * The key writer decides in place (decideInto, no copy of the job table): the same decision as the
 * pure decide; an accepted one leaves the state as decide's events fold it, a refused one leaves it
 * as it was, and rolling the Scratch back restores it exactly.
 */
const decideIntoDecidesTheSame = (trace: Trace): void => {
  for (const step of trace.steps) {
    const own = clone(step.before);
    const scratch = new Scratch(own as Draft);
    const result = decideInto(step.command, scratch, step.now);
    if (!isDeepStrictEqual(result, step.result)) violation(trace, step, `decideInto decided ${JSON.stringify(result)}, decide ${JSON.stringify(step.result)}`);
    if (!isDeepStrictEqual(clone(own), clone(E.isRight(step.result) ? step.after : step.before))) violation(trace, step, 'decideInto left another state than the decision folds to');
    scratch.rollbackTo();
    if (!isDeepStrictEqual(clone(own), clone(step.before))) violation(trace, step, 'rolling the Scratch back did not restore the state');
  }
};

/**
 * The parked index a long-lived state keeps beside it (moved on in place, as the key writer's
 * states are, and rolled back when a flush fails) gives the promotion order a full sort of the
 * parked jobs gives, after every step.
 */
const parkedIndexFollowsInPlaceChanges = (trace: Trace): void => {
  const live = clone(initialKeyState) as Draft;
  const inOrder = (step: Step, when: string) => {
    const indexed = parkedInOrder(live).map((j) => j.jobId);
    const sorted = jobsIn(live, 'parked').sort(byPromotionOrder).map((j) => j.jobId);
    if (indexed.join() !== sorted.join()) violation(trace, step, `${when}: parked index [${indexed.join(', ')}], promotion order [${sorted.join(', ')}]`);
  };
  for (const step of trace.steps) {
    const undone = new Scratch(live);
    decideInto(step.command, undone, step.now);
    inOrder(step, 'decided');
    undone.rollbackTo();
    inOrder(step, 'rolled back');
    decideInto(step.command, new Scratch(live), step.now);
    inOrder(step, 'decided again');
  }
};

/** The state's holding counter (what admission checks against the limit) is the number of holders. */
const holdingCounterIsTheHolders = (trace: Trace): void => {
  for (const step of trace.steps) {
    if (step.after.holding !== holders(step.after).length) violation(trace, step, `holding is ${step.after.holding}, holders are ${holders(step.after).length}`);
  }
};

/** Each wait records the line as the stream's fold has it just before the wait (issue 23: a job's explanation reads it there, not from a fold of the key). */
const everyWaitRecordsItsLine = (trace: Trace): void => {
  for (const step of trace.steps) {
    let state = step.before;
    for (const event of step.events) {
      if (event.type === 'JobParked' || event.type === 'LimitWaiting') {
        const expected = { limit: state.limit, holding: state.holding, paused: state.paused !== undefined };
        if (JSON.stringify(event.data.line) !== JSON.stringify(expected)) violation(trace, step, `${event.type} of ${event.data.jobId} records ${JSON.stringify(event.data.line)}, the line stood at ${JSON.stringify(expected)}`);
      }
      state = fold(state, [event]);
    }
  }
};

describe('key stream invariants (DESIGN.md), over random command sequences with a random clock', () => {
  it('1. holders ≤ limit after every admission (a lowered limit admits no one until holders drop below it)', () => {
    check(holdersWithinLimitAfterEveryAdmission);
  }, TIMEOUT_MS);

  it('2. no idle capacity while jobs wait: parked non-empty ⇒ holders ≥ limit, or the key is paused', () => {
    check(noIdleCapacityWhileJobsWait);
  }, TIMEOUT_MS);

  it('2b. a paused key admits no one (no SlotAcquired or JobPromoted between KeyPaused and KeyResumed)', () => {
    check(pausedKeyAdmitsNoOne);
  }, TIMEOUT_MS);

  it('2c. the full-key policy: a "reject" job never parks at enqueue; a "replace" job that parks leaves no older parked job of its name', () => {
    check(fullKeyPolicy);
  }, TIMEOUT_MS);

  it('3. promotion order: lowest priority number first, then enqueue order (parked and due scheduled jobs)', () => {
    check(promotionOrder);
  }, TIMEOUT_MS);

  it('4. a lease is released at most once; Start/Renew/Complete/Fail/Yield with a stale lease change nothing and say so', () => {
    check(leaseReleasedAtMostOnce);
  }, TIMEOUT_MS);

  it('5. a job is in exactly one of scheduled / parked / holding / finished', () => {
    check(exactlyOnePlace);
  }, TIMEOUT_MS);

  it('6. folding the stream from scratch gives the same state as the incremental one (replay determinism)', () => {
    check(replayDeterminism);
  }, TIMEOUT_MS);

  // The codec accepts -0 and JSON stores 0: the decision must record the stored form.
  it('6. (edge) every priority the codec accepts, -0 included, survives JSON storage unchanged', () => {
    fc.assert(
      fc.property(fc.oneof(fc.constant(-0), fc.integer({ min: -(2 ** 31), max: 2 ** 31 })), (priority) => {
        const command = decodeCommand({
          type: 'Enqueue',
          job: { jobId: 'a', name: 'work', args: {}, queue: 'default', priority, maxAttempts: 1, runAt: null },
        });
        if (E.isLeft(command)) return; // refused at the edge: nothing is stored
        const events = decide(command.right, initialKeyState, T0);
        if (E.isLeft(events)) throw new Error(`Enqueue on a fresh key refused: ${events.left.tag}`);
        const live = fold(initialKeyState, events.right);
        assert.deepStrictEqual(fold(initialKeyState, roundTrip(events.right)), live);
        assert.deepStrictEqual(roundTrip(live), live);
      }),
      { numRuns: 200 },
    );
  });

  it('7. a refused admission costs no attempt; a parked job keeps its priority and any remaining delay', () => {
    check(attemptsAndDelays);
  }, TIMEOUT_MS);
});

describe('key stream decisions, over the same random sequences', () => {
  it('decide never throws on a command the codecs accept, and refuses exactly what it must', () => {
    check(decisionsAreTotalAndRefuseOnlyWhatTheyMust);
  }, TIMEOUT_MS);

  it('invariant 8: a started lease\'s slot is released only by its own handler\'s end or its lapse, whatever an operator does', () => {
    check(startedSlotsEndOnlyWithTheirHandler);
  }, TIMEOUT_MS);

  it('a direct handoff starts only the first job its release promoted onto the worker\'s queue', () => {
    check(handoffStartsOnlyWhatItPromoted);
  }, TIMEOUT_MS);

  it('deciding in place (the command handler\'s path) decides the same and leaves the state as it was', () => {
    check(decideIntoDecidesTheSame);
  }, TIMEOUT_MS);

  it('the parked index of a state changed in place stays in promotion order', () => {
    check(parkedIndexFollowsInPlaceChanges);
  }, TIMEOUT_MS);

  it('every wait records its line as it stood: the limit, the slots held and the pause just before it', () => {
    check(everyWaitRecordsItsLine);
  }, TIMEOUT_MS);

  it('the holding counter always equals the number of holders', () => {
    check(holdingCounterIsTheHolders);
  }, TIMEOUT_MS);

  it('a retry never puts a key over its limit: the dead job takes a free slot or parks, with a fresh set of attempts', () => {
    check(retryIsAnArrival);
  }, TIMEOUT_MS);

  it('ExpireLeases reclaims every expired holder in one command and no live one', () => {
    check(sweeperReclaimsExactlyTheExpired);
  }, TIMEOUT_MS);

  it('the generator reaches the paths the invariants speak of', () => {
    // Paths behind a dead job (every attempt failed, then an operator acted on it): rarer by construction.
    const RARE = new Set(['dead job retried into a slot', 'dead job retried into the line', 'dead job discarded', 'discarded job refused a retry or a discard']);
    const counts = new Map<string, number>();
    const count = (what: string, yes: boolean) => yes && counts.set(what, (counts.get(what) ?? 0) + 1);
    for (const scenario of fc.sample(scenarioArb(), { numRuns: 800, seed: 20_261_130 })) {
      const trace = runScenario(scenario);
      for (const step of trace.steps) {
        const types = new Set(step.events.map((e) => e.type));
        const tag = E.isLeft(step.result) ? step.result.left.tag : null;
        count('promotion after completion', step.command.type === 'Complete' && types.has('JobPromoted'));
        count('direct handoff', (step.command.type === 'Complete' || step.command.type === 'Fail') && types.has('JobStarted'));
        count('handoff passed over for another queue', (step.command.type === 'Complete' || step.command.type === 'Fail') && step.command.handOffTo !== undefined && types.has('JobPromoted') && !types.has('JobStarted'));
        count('promotion after expiry', step.command.type === 'ExpireLeases' && types.has('JobPromoted'));
        count('promotion on a raised limit', step.command.type === 'SetLimit' && types.has('JobPromoted'));
        count('AdmitDue admits', step.command.type === 'AdmitDue' && types.has('SlotAcquired'));
        count('AdmitDue parks', step.command.type === 'AdmitDue' && types.has('JobParked'));
        count('stale lease refused', tag === 'StaleLease');
        count('already started refused', tag === 'AlreadyStarted');
        count('not started refused', tag === 'NotStarted');
        count('retry scheduled', types.has('JobFailed') && types.has('JobScheduled'));
        count('dead', types.has('JobDead'));
        count('started job yielded', step.command.type === 'Yield' && step.before.jobs[step.command.jobId]?.lease?.workerId != null);
        count('started job given back for later', step.command.type === 'Yield' && step.command.delayMs !== undefined && types.has('JobScheduled') && step.before.jobs[step.command.jobId]?.lease?.workerId != null);
        count('given-back job admitted when due', step.command.type === 'AdmitDue' && step.events.some((e) => e.type === 'SlotAcquired' && trace.events.some((y) => y.type === 'JobYielded' && y.data.retryAt !== undefined && y.data.jobId === e.data.jobId)));
        count('revoked', types.has('LeaseRevoked'));
        count('parked discarded', types.has('ParkedDiscarded'));
        count('holder cancelled', step.command.type === 'Cancel' && types.has('SlotReleased'));
        count('running job cancelled: lease revoked', step.command.type === 'Cancel' && types.has('LeaseRevoked') && !types.has('SlotReleased'));
        count('running job released by force', step.command.type === 'RevokeLease' && step.events.some((e) => e.type === 'LeaseRevoked' && e.data.force === true) && types.has('SlotReleased'));
        count('revoked lease ended by its handler', step.command.type === 'Stopped' && types.has('SlotReleased'));
        count('revoked lease lapsed', step.command.type === 'ExpireLeases' && types.has('LeaseExpired') && step.events.some((e) => e.type === 'LeaseExpired' && step.before.jobs[e.data.jobId]?.lease?.revoked !== undefined));
        count('holders above a lowered limit', holders(step.after).length > step.after.limit);
        count('batch parks', step.command.type === 'EnqueueMany' && types.has('SlotAcquired') && types.has('JobParked'));
        count('active job re-enqueued', step.command.type === 'Enqueue' && step.before.jobs[step.command.job.jobId] !== undefined);
        count('dead job retried into a slot', step.command.type === 'RetryJob' && types.has('SlotAcquired'));
        count('dead job retried into the line', step.command.type === 'RetryJob' && types.has('JobParked'));
        count('retry refused: not dead', tag === 'NotDead');
        count('dead job discarded', types.has('DeadDiscarded'));
        count('discarded job refused a retry or a discard', tag === 'NotDead' && (step.command.type === 'RetryJob' || step.command.type === 'DiscardDead') && trace.events.some((e) => e.type === 'DeadDiscarded' && e.data.jobId === (step.command as { jobId: string }).jobId));
      }
    }
    const missing = [
      'promotion after completion', 'direct handoff', 'handoff passed over for another queue', 'promotion after expiry', 'promotion on a raised limit', 'AdmitDue admits', 'AdmitDue parks',
      'stale lease refused', 'already started refused', 'not started refused', 'retry scheduled', 'dead', 'started job yielded',
      'started job given back for later', 'given-back job admitted when due', 'revoked', 'parked discarded', 'holder cancelled', 'holders above a lowered limit', 'batch parks', 'active job re-enqueued',
      'dead job retried into a slot', 'dead job retried into the line', 'retry refused: not dead',
      'running job cancelled: lease revoked', 'revoked lease ended by its handler', 'revoked lease lapsed', 'running job released by force',
      'dead job discarded', 'discarded job refused a retry or a discard',
    ].filter((what) => (counts.get(what) ?? 0) < (RARE.has(what) ? 2 : 5));
    expect(missing, JSON.stringify([...counts])).toEqual([]);
  });
});

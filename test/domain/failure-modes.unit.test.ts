import * as E from 'fp-ts/lib/Either.js';
import { describe, expect, it } from 'vitest';
import type { Command } from '../../src/domain/commands.js';
import { decide } from '../../src/domain/decide/index.js';
import type { KeyEvent } from '../../src/domain/events.js';
import { fold, holders, initialKeyState, jobsIn, parkedInOrder, type KeyState } from '../../src/domain/key-state.js';
import {
  LEASE,
  SEC,
  T0,
  acquired,
  enqueued,
  expired,
  given,
  job,
  limitSet,
  parked,
  promoted,
  released,
  renewed,
  scheduled,
  started,
} from './spec.js';

// Regression specs named after the bugs of ../shared/FAILURE-MODES.md that the decider guards.
// Rows about the queue, dispatch and tooling are guarded where those live.

const right = (r: E.Either<unknown, readonly KeyEvent[]>): readonly KeyEvent[] => {
  if (E.isLeft(r)) throw new Error(`refused: ${JSON.stringify(r.left)}`);
  return r.right;
};

/**
 * Two writers decide on the same revision; the first append wins, the second conflicts on the
 * expected revision and decides again on the new state — what the command layer does.
 */
const race = (history: readonly KeyEvent[], first: Command, second: Command, now: number): KeyState => {
  const base = fold(initialKeyState, history);
  right(decide(second, base, now)); // decided on the old revision: its append is refused
  const afterFirst = fold(base, right(decide(first, base, now)));
  return fold(afterFirst, right(decide(second, afterFirst, now)));
};

const a = job('a');
const b = job('b');
const c = job('c');
const d = job('d');

describe('FAILURE-MODES #1: stranded park (solid_queue #456)', () => {
  const history = [limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0)];
  const park: Command = { type: 'Enqueue', job: b };
  const release: Command = { type: 'Complete', jobId: 'a', leaseId: 'a:1' };

  it('a job parked while the holder releases is promoted by that release, no sweep needed', () => {
    const s = race(history, park, release, T0 + SEC);
    expect(jobsIn(s, 'parked')).toEqual([]);
    expect(holders(s).map((j) => j.jobId)).toEqual(['b']);
  });

  it('the same when the release lands first: the enqueue re-decides and takes the free slot', () => {
    const s = race(history, release, park, T0 + SEC);
    expect(jobsIn(s, 'parked')).toEqual([]);
    expect(holders(s).map((j) => j.jobId)).toEqual(['b']);
  });
});

describe('FAILURE-MODES #2: double release by a reclaimed holder (solid_queue #761)', () => {
  const reclaimedAndHandedOver = [
    limitSet(1),
    enqueued(a),
    acquired('a', 'a:1'),
    started('a', 'a:1', T0),
    enqueued(b),
    parked('b'),
    expired('a', 'a:1', T0 + LEASE, T0 + LEASE),
    released('a', 'a:1', 'expired', T0 + LEASE),
    scheduled('a', T0 + LEASE + 500, T0 + LEASE),
    promoted('b', 'b:2', T0 + LEASE, LEASE),
  ];

  it('a Complete with the reclaimed lease changes nothing and says so', () => {
    given(...reclaimedAndHandedOver)
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, T0 + LEASE + SEC)
      .thenRefused({ tag: 'StaleLease', jobId: 'a', leaseId: 'a:1', currentLeaseId: null });
  });

  it('nor can a Fail, a Renew or a Yield under it free the new holder\'s slot', () => {
    for (const cmd of [
      { type: 'Fail', jobId: 'a', leaseId: 'a:1', error: 'late', jitter: 0 },
      { type: 'Renew', jobId: 'a', leaseId: 'a:1' },
      { type: 'Yield', jobId: 'a', leaseId: 'a:1' },
    ] as const) {
      given(...reclaimedAndHandedOver).when(cmd, T0 + LEASE + SEC).thenRefused({ tag: 'StaleLease', jobId: 'a', leaseId: 'a:1', currentLeaseId: null });
    }
  });

  it('a duplicate delivery of the same admission runs once', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0, 1, 'w1'))
      .when({ type: 'Start', jobId: 'a', leaseId: 'a:1', workerId: 'w2' })
      .thenRefused({ tag: 'AlreadyStarted', jobId: 'a', leaseId: 'a:1', workerId: 'w1' });
  });
});

describe('FAILURE-MODES #3: a parked job runs beside a still-running holder (solid_queue #689)', () => {
  it('a holder that keeps renewing keeps its slot for four times its lease', () => {
    let history: KeyEvent[] = [limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0), enqueued(b), parked('b')];
    for (let at = T0 + LEASE / 3; at <= T0 + 4 * LEASE; at += LEASE / 3) {
      history = [...history, renewed('a', 'a:1', at)];
      given(...history).when({ type: 'ExpireLeases', jitter: 0 }, at).thenNothing();
    }
  });
});

describe('FAILURE-MODES #4: parked jobs silently deleted (pgbus)', () => {
  it('a parked job never expires: a year later it is still parked, first in line', () => {
    const s = given(limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0, 1), enqueued(b), parked('b'), renewed('a', 'a:1', T0 + 365 * 86_400 * SEC))
      .when({ type: 'ExpireLeases', jitter: 0 }, T0 + 365 * 86_400 * SEC)
      .state();
    expect(parkedInOrder(s).map((j) => j.jobId)).toEqual(['b']);
  });
});

describe('FAILURE-MODES #5: a job scheduled for later blocks its key (pgbus)', () => {
  it('a scheduled job holds no slot: another job of the limit-1 key runs meanwhile', () => {
    const later = job('later', { runAt: T0 + 60 * SEC });
    given(limitSet(1), enqueued(later), scheduled('later', T0 + 60 * SEC))
      .when({ type: 'Enqueue', job: a }, T0 + SEC)
      .then(enqueued(a, T0 + SEC), acquired('a', 'a:1', T0 + SEC));
  });
});

/** Limit 2: a and b started, c and d parked. */
const twoRunningTwoParked = [
  limitSet(2),
  enqueued(a),
  acquired('a', 'a:1'),
  enqueued(b),
  acquired('b', 'b:2'),
  started('a', 'a:1', T0),
  started('b', 'b:2', T0),
  enqueued(c),
  parked('c'),
  enqueued(d),
  parked('d'),
];

describe('FAILURE-MODES #6: two holders finish at once, only one parked job promoted (solid_queue #694)', () => {
  it('both releases promote: the second re-decides and promotes the other parked job', () => {
    const s = race(twoRunningTwoParked, { type: 'Complete', jobId: 'a', leaseId: 'a:1' }, { type: 'Complete', jobId: 'b', leaseId: 'b:2' }, T0 + SEC);
    expect(holders(s).map((j) => j.jobId).sort()).toEqual(['c', 'd']);
    expect(jobsIn(s, 'parked')).toEqual([]);
  });
});

describe('FAILURE-MODES #7: the recovery sweep frees one slot per key per run (solid_queue #502)', () => {
  it('one ExpireLeases reclaims every silent holder of the key and promotes as many parked jobs', () => {
    const s = given(...twoRunningTwoParked).when({ type: 'ExpireLeases', jitter: 0 }, T0 + LEASE).state();
    expect(holders(s).map((j) => j.jobId)).toEqual(['c', 'd']);
    expect(jobsIn(s, 'scheduled').map((j) => j.jobId)).toEqual(['a', 'b']);
  });
});

describe('FAILURE-MODES #8: a raised limit does not unblock a full key (pgbus)', () => {
  it('raising the limit promotes parked jobs in the same decision', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(b), parked('b'))
      .when({ type: 'SetLimit', limit: 2, by: 'ops' }, T0 + SEC)
      .then(limitSet(2, T0 + SEC, 'ops'), promoted('b', 'b:2', T0 + SEC, SEC));
  });

  it('an enqueue that owns the limit and raises it promotes the parked jobs before its own job', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(b), parked('b'))
      .when({ type: 'Enqueue', limit: 2, ownsLimit: true, job: c }, T0 + SEC)
      .then(limitSet(2, T0 + SEC), promoted('b', 'b:2', T0 + SEC, SEC), enqueued(c, T0 + SEC), parked('c', T0 + SEC));
  });
});

describe('FAILURE-MODES #9: bulk enqueue skipped the limit (pgbus #413, pg-boss #861)', () => {
  it('EnqueueMany of 10 jobs on a limit-3 key admits 3 and parks 7', () => {
    const s = given()
      .when({ type: 'EnqueueMany', limit: 3, jobs: Array.from({ length: 10 }, (_, i) => job(`j${i}`)) })
      .state();
    expect(holders(s)).toHaveLength(3);
    expect(jobsIn(s, 'parked')).toHaveLength(7);
  });
});

describe('FAILURE-MODES #10: a job refused admission burned a retry attempt (pg-boss 7dea410)', () => {
  it('parking, promotion and an unstarted lease expiring cost no attempt; only Start counts', () => {
    const once = job('once', { maxAttempts: 1 });
    let s = given(limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0)).when({ type: 'Enqueue', job: once }).state();
    s = fold(s, right(decide({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, s, T0 + SEC)));
    // promoted, then its lease lapsed before any worker started it
    s = fold(s, right(decide({ type: 'ExpireLeases', jitter: 0 }, s, T0 + SEC + LEASE)));
    expect(s.jobs.once).toMatchObject({ status: 'holding', attempts: 0 });
    const leaseId = s.jobs.once?.lease?.leaseId ?? '';
    s = fold(s, right(decide({ type: 'Start', jobId: 'once', leaseId, workerId: 'w1' }, s, T0 + 2 * LEASE)));
    expect(s.jobs.once?.attempts).toBe(1);
  });
});

describe('FAILURE-MODES #14: limits bypassed after a forced shutdown (solid_queue #735)', () => {
  it('a yielded job gives its slot back and waits for one like any other', () => {
    const s = given(limitSet(1), enqueued(job('first', { priority: 1 })), acquired('first', 'first:1'), started('first', 'first:1', T0), enqueued(job('urgent', { priority: 0 })), parked('urgent'))
      .when({ type: 'Yield', jobId: 'first', leaseId: 'first:1' }, T0 + SEC)
      .state();
    expect(holders(s).map((j) => j.jobId)).toEqual(['urgent']);
    expect(parkedInOrder(s).map((j) => j.jobId)).toEqual(['first']);
    expect(s.jobs.first?.attempts).toBe(0);
  });
});

describe('a parked delayed job keeps its priority and remaining delay', () => {
  const delayed = job('delayed', { priority: -1, runAt: T0 + 10 * SEC });
  const history = [limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0), enqueued(delayed), scheduled('delayed', T0 + 10 * SEC), enqueued(b), parked('b')];

  it('a slot freed before its run time goes to the parked job, not to the delayed one', () => {
    const s = given(...history).when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, T0 + 5 * SEC).state();
    expect(holders(s).map((j) => j.jobId)).toEqual(['b']);
    expect(s.jobs.delayed).toMatchObject({ status: 'scheduled', runAt: T0 + 10 * SEC, priority: -1 });
  });

  it('once due on a full key it parks with its priority and is promoted ahead of earlier, lower-priority jobs', () => {
    const due = given(...history).when({ type: 'AdmitDue' }, T0 + 10 * SEC).state();
    expect(parkedInOrder(due).map((j) => j.jobId)).toEqual(['delayed', 'b']);
    const after = fold(due, right(decide({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, due, T0 + 11 * SEC)));
    expect(holders(after).map((j) => j.jobId)).toEqual(['delayed']);
  });
});

describe('FAILURE-MODES #12: a batched claim handed out more jobs of a key than it had slots (graphile-worker #621)', () => {
  // The queue carries admissions only, and a start is decided by the key: a batch that asked to
  // start a job without a slot (a stale or forged message beside the real ones) starts nothing more.
  const bothStarted = [limitSet(2), enqueued(a), acquired('a', 'a:1'), enqueued(b), acquired('b', 'b:2'), enqueued(c), parked('c'), started('a', 'a:1', T0), started('b', 'b:2', T0)];

  it('with both slots of a limit-2 key started, a Start of its parked job is refused and the holders stay two', () => {
    given(...bothStarted).when({ type: 'Start', jobId: 'c', leaseId: 'c:3', workerId: 'w2' }).thenRefused({ tag: 'StaleLease', jobId: 'c', leaseId: 'c:3', currentLeaseId: null });
    expect(holders(fold(initialKeyState, bothStarted)).map((j) => j.jobId)).toEqual(['a', 'b']);
  });
});

describe('FAILURE-MODES #13: a slot leaked forever when a claim was half-written (Hatchet #4494)', () => {
  it('an admission is one event naming its holder and lease: the slots in use are the jobs those events name, no count kept apart', () => {
    given(limitSet(1)).when({ type: 'Enqueue', job: a }).then(enqueued(a), acquired('a', 'a:1'));
    const s = given(limitSet(1), enqueued(a), acquired('a', 'a:1')).when({ type: 'Enqueue', job: b }).state();
    expect(holders(s).map((j) => [j.jobId, j.lease?.leaseId])).toEqual([['a', 'a:1']]);
    expect(parkedInOrder(s).map((j) => j.jobId)).toEqual(['b']);
  });

  it('a claim whose start was never recorded (killed before its commit) is made again on the same lease, counting one attempt', () => {
    const s = given(limitSet(1), enqueued(a), acquired('a', 'a:1')).when({ type: 'Start', jobId: 'a', leaseId: 'a:1', workerId: 'w2' }, T0 + SEC).state();
    expect(s.jobs.a).toMatchObject({ attempts: 1, lease: { leaseId: 'a:1', workerId: 'w2' } });
  });

  it('a started holder whose worker died frees its slot once its lease runs out, to the next job in line', () => {
    const s = given(limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0), enqueued(b), parked('b')).when({ type: 'ExpireLeases', jitter: 0 }, T0 + LEASE).state();
    expect(holders(s).map((j) => j.jobId)).toEqual(['b']);
    expect(jobsIn(s, 'scheduled').map((j) => j.jobId)).toEqual(['a']);
  });
});

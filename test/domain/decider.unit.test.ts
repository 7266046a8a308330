import * as E from 'fp-ts/lib/Either.js';
import { describe, expect, it } from 'vitest';
import type { Command } from '../../src/domain/commands.js';
import { decide } from '../../src/domain/decide/index.js';
import { mk, type KeyEvent } from '../../src/domain/events.js';
import { fold, initialKeyState, parkedInOrder } from '../../src/domain/key-state.js';
import {
  LEASE,
  SEC,
  T0,
  acquired,
  cancelled,
  completed,
  dead,
  discarded,
  enqueued,
  expired,
  failed,
  given,
  job,
  limitSet,
  parked,
  paused,
  promoted,
  rejected,
  released,
  renewed,
  replaced,
  resumed,
  revoked,
  scheduled,
  started,
  yielded,
} from './spec.js';

// One spec per command: the key's history, the command, the decision.

const a = job('a');
const b = job('b');
const c = job('c');
/** Key with limit 1: a holds the slot (started by w1), b is parked. */
const aRunningBParked = [limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(b), parked('b'), started('a', 'a:1', T0 + SEC)];

describe('Enqueue', () => {
  it('the first enqueue of a key sets its limit and takes a slot', () => {
    given()
      .when({ type: 'Enqueue', limit: 2, job: a })
      .then(limitSet(2), enqueued(a), acquired('a', 'a:1'));
  });

  it('a new key without a limit gets limit 1 and a 30 s lease', () => {
    given().when({ type: 'Enqueue', job: a }).then(limitSet(1), enqueued(a), acquired('a', 'a:1'));
  });

  it('parks when the key is at its limit', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'Enqueue', limit: 1, job: b }, T0 + SEC)
      .then(enqueued(b, T0 + SEC), parked('b', T0 + SEC));
  });

  it('a job due later is scheduled and holds no slot', () => {
    given(limitSet(1))
      .when({ type: 'Enqueue', job: job('later', { runAt: T0 + 60 * SEC }) })
      .then(enqueued(job('later', { runAt: T0 + 60 * SEC })), scheduled('later', T0 + 60 * SEC));
  });

  it('a run time not later than now is due at once', () => {
    given(limitSet(1))
      .when({ type: 'Enqueue', job: job('now', { runAt: T0 }) })
      .then(enqueued(job('now', { runAt: T0 })), acquired('now', 'now:1'));
  });

  it('a job with its own lease gets it, counted from its start', () => {
    given(limitSet(1))
      .when({ type: 'Enqueue', job: job('slow', { leaseMs: 120 * SEC }) })
      .then(enqueued(job('slow', { leaseMs: 120 * SEC })), acquired('slow', 'slow:1', T0));
    given(limitSet(1), enqueued(job('slow', { leaseMs: 120 * SEC })), acquired('slow', 'slow:1', T0))
      .when({ type: 'Start', jobId: 'slow', leaseId: 'slow:1', workerId: 'w1' }, T0 + SEC)
      .then(started('slow', 'slow:1', T0 + SEC, 1, 'w1', 120 * SEC));
  });

  it('a retried enqueue of a job already on the key records nothing new', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1')).when({ type: 'Enqueue', limit: 1, job: a }).thenNothing();
  });

  it('a key keeps the limit its first enqueue set: a later enqueue naming another limit is refused, and records nothing', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'Enqueue', limit: 2, job: b }, T0 + SEC)
      .thenRefused({ tag: 'LimitMismatch', recorded: 1, requested: 2 });
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'EnqueueMany', limit: 3, jobs: [b, c] }, T0 + SEC)
      .thenRefused({ tag: 'LimitMismatch', recorded: 1, requested: 3 });
  });

  it('an enqueue naming the recorded limit, or none, is admitted as usual', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'Enqueue', limit: 1, job: b }, T0 + SEC)
      .then(enqueued(b, T0 + SEC), parked('b', T0 + SEC));
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'Enqueue', job: b }, T0 + SEC)
      .then(enqueued(b, T0 + SEC), parked('b', T0 + SEC));
  });

  it('an enqueue that owns the limit (a job definition with ownsLimit) changes it: KeyLimitSet before the job', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'Enqueue', limit: 2, ownsLimit: true, job: b }, T0 + SEC)
      .then(limitSet(2, T0 + SEC), enqueued(b, T0 + SEC), acquired('b', 'b:2', T0 + SEC));
  });
});

describe('EnqueueMany', () => {
  it('admits up to the limit and parks the rest, in one decision', () => {
    given()
      .when({ type: 'EnqueueMany', limit: 2, jobs: [a, b, c] })
      .then(limitSet(2), enqueued(a), acquired('a', 'a:1'), enqueued(b), acquired('b', 'b:2'), enqueued(c), parked('c'));
  });

  it('skips jobs already on the key', () => {
    given(limitSet(2), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'EnqueueMany', jobs: [a, b] })
      .then(enqueued(b), acquired('b', 'b:2'));
  });
});

describe('AdmitDue', () => {
  const later = job('later', { runAt: T0 + 10 * SEC });
  it('admits a scheduled job once due', () => {
    given(limitSet(1), enqueued(later), scheduled('later', T0 + 10 * SEC))
      .when({ type: 'AdmitDue' }, T0 + 10 * SEC)
      .then(acquired('later', 'later:1', T0 + 10 * SEC));
  });

  it('parks a due job when the key is full', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(later), scheduled('later', T0 + 10 * SEC))
      .when({ type: 'AdmitDue' }, T0 + 11 * SEC)
      .then(parked('later', T0 + 11 * SEC));
  });

  it('does nothing before the run time', () => {
    given(limitSet(1), enqueued(later), scheduled('later', T0 + 10 * SEC)).when({ type: 'AdmitDue' }, T0 + 9 * SEC).thenNothing();
  });

  it('admits due jobs in priority order, then enqueue order', () => {
    const low = job('low', { runAt: T0 + SEC, priority: 5 });
    const high = job('high', { runAt: T0 + 2 * SEC, priority: 1 });
    given(limitSet(1), enqueued(low), scheduled('low', T0 + SEC), enqueued(high), scheduled('high', T0 + 2 * SEC))
      .when({ type: 'AdmitDue' }, T0 + 5 * SEC)
      .then(acquired('high', 'high:1', T0 + 5 * SEC), parked('low', T0 + 5 * SEC));
  });
});

describe('Start', () => {
  it('counts the attempt and restarts the lease from now', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'Start', jobId: 'a', leaseId: 'a:1', workerId: 'w1' }, T0 + 2 * SEC)
      .then(started('a', 'a:1', T0 + 2 * SEC, 1));
  });

  it('a second start under the same lease (duplicate delivery) runs nothing', () => {
    given(...aRunningBParked)
      .when({ type: 'Start', jobId: 'a', leaseId: 'a:1', workerId: 'w2' })
      .thenRefused({ tag: 'AlreadyStarted', jobId: 'a', leaseId: 'a:1', workerId: 'w1' });
  });

  it('a stale lease is refused', () => {
    given(...aRunningBParked)
      .when({ type: 'Start', jobId: 'a', leaseId: 'a:0', workerId: 'w2' })
      .thenRefused({ tag: 'StaleLease', jobId: 'a', leaseId: 'a:0', currentLeaseId: 'a:1' });
  });
});

describe('Renew', () => {
  it('pushes the expiry a lease ahead of now', () => {
    given(...aRunningBParked)
      .when({ type: 'Renew', jobId: 'a', leaseId: 'a:1' }, T0 + 20 * SEC)
      .then(renewed('a', 'a:1', T0 + 20 * SEC));
  });

  it('renews a lease past its expiry that was not reclaimed yet (only LeaseExpired takes a slot)', () => {
    given(...aRunningBParked)
      .when({ type: 'Renew', jobId: 'a', leaseId: 'a:1' }, T0 + 40 * SEC)
      .then(renewed('a', 'a:1', T0 + 40 * SEC));
  });

  it('a reclaimed lease is refused', () => {
    given(...aRunningBParked, expired('a', 'a:1', T0 + SEC + LEASE, T0 + 40 * SEC), released('a', 'a:1', 'expired', T0 + 40 * SEC))
      .when({ type: 'Renew', jobId: 'a', leaseId: 'a:1' }, T0 + 41 * SEC)
      .thenRefused({ tag: 'StaleLease', jobId: 'a', leaseId: 'a:1', currentLeaseId: null });
  });
});

describe('Complete', () => {
  it('completes, releases and promotes the next parked job in one decision', () => {
    given(...aRunningBParked)
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, T0 + 5 * SEC)
      .then(completed('a', 'a:1', T0 + 5 * SEC), released('a', 'a:1', 'completed', T0 + 5 * SEC), promoted('b', 'b:2', T0 + 5 * SEC, 5 * SEC));
  });

  it('with handOffTo, the worker starts the job it promoted in the same decision (direct handoff)', () => {
    const at = T0 + 5 * SEC;
    given(...aRunningBParked)
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1', handOffTo: { workerId: 'w2', queue: 'default' } }, at)
      .then(completed('a', 'a:1', at), released('a', 'a:1', 'completed', at), promoted('b', 'b:2', at, 5 * SEC), started('b', 'b:2', at, 1, 'w2'));
  });

  it('a handoff never starts a job of another queue: it waits for its own queue\'s worker', () => {
    const at = T0 + 5 * SEC;
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(job('mail', { queue: 'mail' })), parked('mail'), started('a', 'a:1', T0 + SEC))
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1', handOffTo: { workerId: 'w2', queue: 'default' } }, at)
      .then(completed('a', 'a:1', at), released('a', 'a:1', 'completed', at), promoted('mail', 'mail:2', at, 5 * SEC));
  });

  it('with nothing parked, a handoff starts nothing', () => {
    const at = T0 + 5 * SEC;
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), started('a', 'a:1', T0 + SEC))
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1', handOffTo: { workerId: 'w2', queue: 'default' } }, at)
      .then(completed('a', 'a:1', at), released('a', 'a:1', 'completed', at));
  });

  it('a lease never started cannot complete', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' })
      .thenRefused({ tag: 'NotStarted', jobId: 'a', leaseId: 'a:1' });
  });
});

describe('Fail', () => {
  it('releases, schedules the retry after a backoff and promotes', () => {
    // attempt 1 failed: 1 s base, jitter 0.5 -> 500 + 250 ms
    given(...aRunningBParked)
      .when({ type: 'Fail', jobId: 'a', leaseId: 'a:1', error: 'boom', jitter: 0.5 }, T0 + 5 * SEC)
      .then(
        failed('a', 'a:1', T0 + 5 * SEC, 1, 'boom', T0 + 5 * SEC + 750),
        released('a', 'a:1', 'failed', T0 + 5 * SEC),
        scheduled('a', T0 + 5 * SEC + 750, T0 + 5 * SEC),
        promoted('b', 'b:2', T0 + 5 * SEC, 5 * SEC),
      );
  });

  it('with handOffTo, the slot the failure frees goes to the next job, started by that worker', () => {
    const at = T0 + 5 * SEC;
    given(...aRunningBParked)
      .when({ type: 'Fail', jobId: 'a', leaseId: 'a:1', error: 'boom', jitter: 0.5, handOffTo: { workerId: 'w1', queue: 'default' } }, at)
      .then(
        failed('a', 'a:1', at, 1, 'boom', at + 750),
        released('a', 'a:1', 'failed', at),
        scheduled('a', at + 750, at),
        promoted('b', 'b:2', at, 5 * SEC),
        started('b', 'b:2', at, 1, 'w1'),
      );
  });

  it('the last attempt failing makes the job dead', () => {
    const once = job('once', { maxAttempts: 1 });
    given(limitSet(1), enqueued(once), acquired('once', 'once:1'), started('once', 'once:1', T0))
      .when({ type: 'Fail', jobId: 'once', leaseId: 'once:1', error: 'boom', jitter: 0 }, T0 + SEC)
      .then(
        failed('once', 'once:1', T0 + SEC, 1, 'boom', null),
        released('once', 'once:1', 'failed', T0 + SEC),
        dead('once', 'failed; no attempt left (1/1)', T0 + SEC),
      );
  });
});

describe('Yield', () => {
  it('gives the slot back, the attempt is not counted, and the job waits in line again', () => {
    const state = given(...aRunningBParked)
      .when({ type: 'Yield', jobId: 'a', leaseId: 'a:1' }, T0 + 2 * SEC)
      .state();
    given(...aRunningBParked)
      .when({ type: 'Yield', jobId: 'a', leaseId: 'a:1' }, T0 + 2 * SEC)
      .then(
        yielded('a', 'a:1', T0 + 2 * SEC, 0),
        released('a', 'a:1', 'yielded', T0 + 2 * SEC),
        parked('a', T0 + 2 * SEC),
        // a was enqueued first, so it is first in line again
        promoted('a', 'a:2', T0 + 2 * SEC, 0),
      );
    expect(state.jobs.a?.attempts).toBe(0);
  });

  describe('given back by a worker with no handler for it (delayMs, reason)', () => {
    const reason = 'no handler for sendEmail in worker w1';
    const givenBack = (jobId: string, leaseId: string, at: number, attempts: number, retryAt: number) =>
      mk('JobYielded', { jobId, leaseId, attempts, reason, retryAt, at });
    const giveBack = { type: 'Yield', jobId: 'a', leaseId: 'a:1', delayMs: 10 * SEC, reason } as const;
    const at = T0 + 2 * SEC;

    it('issue 21 #6: give-backs are counted; one past deadAfterMs since the first makes the job dead ("no worker knows"), attempts untouched, retryable', () => {
      const first = T0 + 2 * SEC;
      const history = [...aRunningBParked, givenBack('a', 'a:1', first, 0, first + 10 * SEC), released('a', 'a:1', 'yielded', first), scheduled('a', first + 10 * SEC, first), promoted('b', 'b:2', first, first - T0)];
      // b runs and ends; a is admitted again, started, and given back again: counted twice.
      const again = [...history, started('b', 'b:2', first + SEC), completed('b', 'b:2', first + 2 * SEC), released('b', 'b:2', 'completed', first + 2 * SEC), acquired('a', 'a:3', first + 12 * SEC), started('a', 'a:3', first + 13 * SEC)];
      expect(fold(initialKeyState, again).jobs.a?.givenBack).toEqual({ count: 1, since: first });
      const bounded = { ...giveBack, leaseId: 'a:3', deadAfterMs: 60 * SEC, name: 'sendEmail' } as const;
      // Within the bound: scheduled again, counted.
      const within = given(...again).when(bounded, first + 14 * SEC);
      within.then(givenBack('a', 'a:3', first + 14 * SEC, 0, first + 24 * SEC), released('a', 'a:3', 'yielded', first + 14 * SEC), scheduled('a', first + 24 * SEC, first + 14 * SEC));
      expect(within.state().jobs.a?.givenBack).toEqual({ count: 2, since: first });
      // Past it: dead, not offered again.
      given(...again)
        .when(bounded, first + 61 * SEC)
        .then(
          mk('JobYielded', { jobId: 'a', leaseId: 'a:3', attempts: 0, reason, at: first + 61 * SEC }),
          released('a', 'a:3', 'yielded', first + 61 * SEC),
          dead('a', 'no worker knows sendEmail: given back 2 times over 61 s', first + 61 * SEC),
        );
    });

    it('the attempt is not counted; the job waits for its retry time holding no slot, and the slot goes to the next parked job', () => {
      const when = given(...aRunningBParked).when(giveBack, at);
      when.then(
        givenBack('a', 'a:1', at, 0, at + 10 * SEC),
        released('a', 'a:1', 'yielded', at),
        scheduled('a', at + 10 * SEC, at),
        promoted('b', 'b:2', at, at - T0),
      );
      expect(when.state().jobs.a).toMatchObject({ status: 'scheduled', runAt: at + 10 * SEC, attempts: 0, lease: null });
    });

    /** The key's history after the give-back as the decider decides it (not as a spec writes it). */
    const afterGiveBack = (): KeyEvent[] => {
      const decided = decide(giveBack, fold(initialKeyState, aRunningBParked), at);
      if (E.isLeft(decided)) throw new Error(`give-back refused: ${decided.left.tag}`);
      return [...aRunningBParked, ...decided.right];
    };

    it('is offered again only when due: parked behind the job holding the slot, or admitted to a free one, its next start still attempt 1', () => {
      given(...afterGiveBack()).when({ type: 'AdmitDue' }, at + 10 * SEC - 1).thenNothing();
      given(...afterGiveBack()).when({ type: 'AdmitDue' }, at + 10 * SEC).then(parked('a', at + 10 * SEC));
      const freed = [...afterGiveBack(), started('b', 'b:2', at), completed('b', 'b:2', at + SEC), released('b', 'b:2', 'completed', at + SEC)];
      given(...freed).when({ type: 'AdmitDue' }, at + 10 * SEC).then(acquired('a', 'a:3', at + 10 * SEC));
      given(...freed, acquired('a', 'a:3', at + 10 * SEC))
        .when({ type: 'Start', jobId: 'a', leaseId: 'a:3', workerId: 'w2' }, at + 11 * SEC)
        .then(started('a', 'a:3', at + 11 * SEC, 1, 'w2'));
    });

    it('a job without a key (its own limit-1 stream) is given back the same way', () => {
      const { limits: _none, ...spec } = a;
      const solo = mk('JobEnqueued', { ...spec, leaseMs: LEASE, solo: true, at: T0 });
      given(solo, acquired('a', 'a:1'), started('a', 'a:1', T0 + SEC))
        .when(giveBack, at)
        .then(givenBack('a', 'a:1', at, 0, at + 10 * SEC), released('a', 'a:1', 'yielded', at), scheduled('a', at + 10 * SEC, at));
    });
  });
});

describe('ExpireLeases', () => {
  it('reclaims a silent started holder: the attempt counts, the job is retried, the parked job promoted', () => {
    const at = T0 + SEC + LEASE;
    given(...aRunningBParked)
      .when({ type: 'ExpireLeases', jitter: 0 }, at)
      .then(expired('a', 'a:1', at, at), released('a', 'a:1', 'expired', at), scheduled('a', at + 500, at), promoted('b', 'b:2', at, at - T0));
  });

  it('an admission no worker has started holds its slot however long it waits: no events, no expiry (issue 9)', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(b), parked('b'))
      .when({ type: 'ExpireLeases', jitter: 0 }, T0 + 365 * 24 * 3_600 * SEC)
      .thenNothing();
  });

  it('an older admission that recorded an expiry is not expired by it either: only a started lease counts', () => {
    const legacy = mk('SlotAcquired', { jobId: 'a', leaseId: 'a:1', expiresAt: T0 + LEASE, at: T0 });
    given(limitSet(1), enqueued(a), legacy).when({ type: 'ExpireLeases', jitter: 0 }, T0 + 2 * LEASE).thenNothing();
  });

  it('leaves live leases alone', () => {
    given(...aRunningBParked).when({ type: 'ExpireLeases', jitter: 0 }, T0 + LEASE).thenNothing();
  });

  it('issue 21 #7: no lease runs out sooner than one lease after an outage (graceFrom), or after the quarantine of its stream or of a limit key of its job (streamGrace); a grace of another stream holds nothing', () => {
    const at = T0 + SEC + 10 * LEASE;
    const back = at - LEASE / 2;
    given(...aRunningBParked).when({ type: 'ExpireLeases', jitter: 0, graceFrom: back }, at).thenNothing();
    // Its own stream's quarantine (decide() decides on the stream named '').
    given(...aRunningBParked).when({ type: 'ExpireLeases', jitter: 0, streamGrace: { '': back } }, at).thenNothing();
    // A job under a further limit: its result releases that key's slot too, so that key's quarantine held it back as well.
    const capped = job('a', { limits: [{ key: 'cap' }] });
    const history = [limitSet(1), enqueued(capped), acquired('a', 'a:1'), started('a', 'a:1', T0 + SEC)];
    given(...history).when({ type: 'ExpireLeases', jitter: 0, streamGrace: { 'key:cap': back } }, at).thenNothing();
    given(...history)
      .when({ type: 'ExpireLeases', jitter: 0, streamGrace: { 'key:other': back, 'key:cap': at - 2 * LEASE } }, at)
      .then(expired('a', 'a:1', T0 + SEC + LEASE, at), released('a', 'a:1', 'expired', at), scheduled('a', at + 500, at));
  });
});

describe('the dispatch message follows its lease (issue 9: the archive is part of the append)', () => {
  const fromMessage = [limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(b), parked('b'), started('a', 'a:1', T0 + SEC, 1, 'w1', LEASE, '42')];

  it('Start records the message it was read from', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'Start', jobId: 'a', leaseId: 'a:1', workerId: 'w1', msgId: '42' }, T0 + SEC)
      .then(started('a', 'a:1', T0 + SEC, 1, 'w1', LEASE, '42'));
  });

  it('a renewal names it, so its visibility moves with the lease', () => {
    given(...fromMessage).when({ type: 'Renew', jobId: 'a', leaseId: 'a:1' }, T0 + 5 * SEC).then(renewed('a', 'a:1', T0 + 5 * SEC, LEASE, '42'));
  });

  it('every release names it, whoever releases (here a completion and an expiry), so it is archived in that append', () => {
    given(...fromMessage)
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, T0 + 2 * SEC)
      .then(completed('a', 'a:1', T0 + 2 * SEC), released('a', 'a:1', 'completed', T0 + 2 * SEC, '42'), promoted('b', 'b:2', T0 + 2 * SEC, 2 * SEC));
    const at = T0 + SEC + LEASE;
    given(...fromMessage)
      .when({ type: 'ExpireLeases', jitter: 0 }, at)
      .then(expired('a', 'a:1', at, at), released('a', 'a:1', 'expired', at, '42'), scheduled('a', at + 500, at), promoted('b', 'b:2', at, at - T0));
  });

  it('a job started by direct handoff has no message to name', () => {
    const state = given(...fromMessage)
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1', handOffTo: { workerId: 'w1', queue: 'default' } }, T0 + 2 * SEC)
      .state();
    expect(state.jobs.b?.lease).toMatchObject({ leaseId: 'b:2', workerId: 'w1', msgId: null });
  });
});

describe('Enqueue on a full key: whenFull', () => {
  const full = [limitSet(1), enqueued(a), acquired('a', 'a:1')];

  it('reject: the job is recorded as rejected and holds nothing; with a free slot it is admitted as usual', () => {
    given(...full)
      .when({ type: 'Enqueue', job: { ...b, whenFull: 'reject' } })
      .then(enqueued({ ...b, whenFull: 'reject' }), rejected('b', 'key full (limit 1)'));
    given(limitSet(2), enqueued(a), acquired('a', 'a:1'))
      .when({ type: 'Enqueue', job: { ...b, whenFull: 'reject' } })
      .then(enqueued({ ...b, whenFull: 'reject' }), acquired('b', 'b:2'));
  });

  it('reject on a paused key says so', () => {
    given(limitSet(2), enqueued(a), acquired('a', 'a:1'), paused('ops', null))
      .when({ type: 'Enqueue', job: { ...b, whenFull: 'reject' } })
      .then(enqueued({ ...b, whenFull: 'reject' }), rejected('b', 'key paused'));
  });

  it('replace: the newest parks in place of the parked jobs of its name enqueued with replace (a trailing debounce); others stay', () => {
    const debounced = (spec: ReturnType<typeof job>) => ({ ...spec, name: 'reindex', whenFull: 'replace' as const });
    given(...full, enqueued(debounced(b)), parked('b'), enqueued(c), parked('c'))
      .when({ type: 'Enqueue', job: debounced(job('d')) }, T0 + SEC)
      .then(enqueued(debounced(job('d')), T0 + SEC), replaced('b', 'd', T0 + SEC), parked('d', T0 + SEC));
  });

  it('park (the default) parks', () => {
    given(...full)
      .when({ type: 'Enqueue', job: { ...b, whenFull: 'park' } })
      .then(enqueued({ ...b, whenFull: 'park' }), parked('b'));
  });
});

describe('PauseKey and ResumeKey', () => {
  const running = [limitSet(2), enqueued(a), acquired('a', 'a:1')];

  it('while paused nothing new is admitted: an enqueue parks though a slot is free', () => {
    given(...running, paused('ops', 'vendor outage'))
      .when({ type: 'Enqueue', job: b }, T0 + SEC)
      .then(enqueued(b, T0 + SEC), parked('b', T0 + SEC));
  });

  it('holders finish, and their release promotes no one while paused', () => {
    given(...running, enqueued(b), parked('b'), paused('ops', null), started('a', 'a:1', T0))
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, T0 + SEC)
      .then(completed('a', 'a:1', T0 + SEC), released('a', 'a:1', 'completed', T0 + SEC));
  });

  it('a due job parks while paused', () => {
    given(...running, enqueued({ ...b, runAt: T0 + SEC }), scheduled('b', T0 + SEC), paused('ops', null))
      .when({ type: 'AdmitDue' }, T0 + 2 * SEC)
      .then(parked('b', T0 + 2 * SEC));
  });

  it('pausing is recorded with who and why; pausing a paused key is refused, so the first who and why stay', () => {
    given(...running)
      .when({ type: 'PauseKey', by: 'ops', reason: 'vendor outage' }, T0 + SEC)
      .then(paused('ops', 'vendor outage', T0 + SEC));
    given(...running, paused('ops', 'vendor outage'))
      .when({ type: 'PauseKey', by: 'bob' })
      .thenRefused({ tag: 'AlreadyPaused', by: 'ops', reason: 'vendor outage' });
  });

  it('resuming promotes the parked jobs into the free slots, in their order, in the same append', () => {
    given(...running, paused('ops', null), enqueued(b), parked('b'), enqueued(c), parked('c'), enqueued(job('d')), parked('d'))
      .when({ type: 'ResumeKey', by: 'ops', reason: 'vendor back' }, T0 + SEC)
      .then(resumed('ops', 'vendor back', T0 + SEC), promoted('b', 'b:2', T0 + SEC, SEC));
  });

  it('resuming a key that runs is refused', () => {
    given(...running).when({ type: 'ResumeKey', by: 'ops' }).thenRefused({ tag: 'NotPaused' });
  });
});

describe('SetLimit', () => {
  it('a raise promotes as many parked jobs as it frees slots', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(b), parked('b'), enqueued(c), parked('c'))
      .when({ type: 'SetLimit', limit: 3, by: 'ops' }, T0 + SEC)
      .then(limitSet(3, T0 + SEC, 'ops'), promoted('b', 'b:2', T0 + SEC, SEC), promoted('c', 'c:3', T0 + SEC, SEC));
  });

  it('a lower limit preempts no one', () => {
    given(limitSet(2), enqueued(a), acquired('a', 'a:1'), enqueued(b), acquired('b', 'b:2'))
      .when({ type: 'SetLimit', limit: 1, by: 'ops' })
      .then(limitSet(1, T0, 'ops'));
  });

  it('the same limit records nothing', () => {
    given(limitSet(2)).when({ type: 'SetLimit', limit: 2, by: 'ops' }).thenNothing();
  });
});

describe('RevokeLease', () => {
  it('issue 21 #1: revokes a running holder without freeing its slot; the parked job waits for the handler to stop', () => {
    given(...aRunningBParked).when({ type: 'RevokeLease', jobId: 'a', by: 'ops', jitter: 0 }, T0 + 2 * SEC).then(revoked('a', 'a:1', 'ops', T0 + 2 * SEC));
  });

  it('once the worker says the handler stopped, the slot passes on; its started attempt counts and it is retried', () => {
    given(...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 2 * SEC))
      .when({ type: 'Stopped', jobId: 'a', leaseId: 'a:1', jitter: 0 }, T0 + 3 * SEC)
      .then(released('a', 'a:1', 'revoked', T0 + 3 * SEC), scheduled('a', T0 + 3 * SEC + 500, T0 + 3 * SEC), promoted('b', 'b:2', T0 + 3 * SEC, 3 * SEC));
  });

  it('a revoked lease whose worker never answers lapses like any other, and the slot passes on then', () => {
    given(...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 2 * SEC))
      .when({ type: 'ExpireLeases', jitter: 0 }, T0 + SEC + LEASE)
      .then(expired('a', 'a:1', T0 + SEC + LEASE, T0 + SEC + LEASE), released('a', 'a:1', 'expired', T0 + SEC + LEASE), scheduled('a', T0 + SEC + LEASE + 500, T0 + SEC + LEASE), promoted('b', 'b:2', T0 + SEC + LEASE, SEC + LEASE));
  });

  it('a revoked lease is not renewed: the refusal tells the worker to stop the handler', () => {
    given(...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 2 * SEC))
      .when({ type: 'Renew', jobId: 'a', leaseId: 'a:1' }, T0 + 3 * SEC)
      .thenRefused({ tag: 'LeaseRevoked', jobId: 'a', leaseId: 'a:1', by: 'ops' });
  });

  it('a handler that completed before it heard of the revocation is recorded as completed', () => {
    given(...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 2 * SEC))
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, T0 + 3 * SEC)
      .then(completed('a', 'a:1', T0 + 3 * SEC), released('a', 'a:1', 'completed', T0 + 3 * SEC), promoted('b', 'b:2', T0 + 3 * SEC, 3 * SEC));
  });

  it('a lease nobody revoked cannot end as stopped', () => {
    given(...aRunningBParked).when({ type: 'Stopped', jobId: 'a', leaseId: 'a:1', jitter: 0 }).thenRefused({ tag: 'NotRevoked', jobId: 'a', leaseId: 'a:1' });
  });

  it('a second revocation of the same lease records nothing', () => {
    given(...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 2 * SEC)).when({ type: 'RevokeLease', jobId: 'a', by: 'ops2', jitter: 0 }).thenNothing();
  });

  it('revokes every holder of the key when no job is named', () => {
    given(limitSet(2), enqueued(a), acquired('a', 'a:1'), enqueued(b), acquired('b', 'b:2'))
      .when({ type: 'RevokeLease', by: 'ops', jitter: 0 })
      .then(
        revoked('a', 'a:1', 'ops', T0),
        released('a', 'a:1', 'revoked', T0),
        parked('a'),
        revoked('b', 'b:2', 'ops', T0),
        released('b', 'b:2', 'revoked', T0),
        parked('b'),
        promoted('a', 'a:3', T0, 0),
        promoted('b', 'b:4', T0, 0),
      );
  });

  it('a job holding no slot is refused', () => {
    given(...aRunningBParked).when({ type: 'RevokeLease', jobId: 'b', by: 'ops', jitter: 0 }).thenRefused({ tag: 'NotHolding', jobId: 'b' });
  });
});

describe('DiscardParked', () => {
  it('discards the named parked jobs', () => {
    given(...aRunningBParked).when({ type: 'DiscardParked', jobIds: ['b'], by: 'ops' }).then(discarded('b', 'ops', T0));
  });

  it('discards every parked job when none is named', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(b), parked('b'), enqueued(c), parked('c'))
      .when({ type: 'DiscardParked', by: 'ops' })
      .then(discarded('b', 'ops', T0), discarded('c', 'ops', T0));
  });

  it('refuses the whole command when a named job is not parked', () => {
    given(...aRunningBParked)
      .when({ type: 'DiscardParked', jobIds: ['b', 'a', 'zz'], by: 'ops' })
      .thenRefused({ tag: 'NotParked', jobIds: ['a', 'zz'] });
  });
});

describe('Cancel', () => {
  it('issue 21 #1: a cancel of a running job revokes its lease and frees nothing until its handler stopped', () => {
    given(...aRunningBParked).when({ type: 'Cancel', jobId: 'a', by: 'ops' }, T0 + 3 * SEC).then(revoked('a', 'a:1', 'ops', T0 + 3 * SEC, true));
  });

  it('the handler stopped: the job is cancelled and its slot goes to the next parked job', () => {
    given(...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 3 * SEC, true))
      .when({ type: 'Stopped', jobId: 'a', leaseId: 'a:1', jitter: 0 }, T0 + 4 * SEC)
      .then(cancelled('a', 'ops', T0 + 4 * SEC), released('a', 'a:1', 'cancelled', T0 + 4 * SEC), promoted('b', 'b:2', T0 + 4 * SEC, 4 * SEC));
  });

  it('a cancelled job whose handler failed, or gave its slot back, is cancelled, never retried', () => {
    const revokedA = [...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 3 * SEC, true)];
    given(...revokedA)
      .when({ type: 'Fail', jobId: 'a', leaseId: 'a:1', error: 'aborted', jitter: 0 }, T0 + 4 * SEC)
      .then(failed('a', 'a:1', T0 + 4 * SEC, 1, 'aborted', null), released('a', 'a:1', 'failed', T0 + 4 * SEC), cancelled('a', 'ops', T0 + 4 * SEC), promoted('b', 'b:2', T0 + 4 * SEC, 4 * SEC));
    given(...revokedA)
      .when({ type: 'Yield', jobId: 'a', leaseId: 'a:1' }, T0 + 4 * SEC)
      .then(yielded('a', 'a:1', T0 + 4 * SEC, 0), released('a', 'a:1', 'yielded', T0 + 4 * SEC), cancelled('a', 'ops', T0 + 4 * SEC), promoted('b', 'b:2', T0 + 4 * SEC, 4 * SEC));
  });

  it('issue 21 #6: a cancelled job that no worker knows, given back with a delay, is cancelled and not offered again: its JobYielded carries no retryAt and counts no give-back', () => {
    const revokedA = [...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 3 * SEC, true)];
    const spec = given(...revokedA).when({ type: 'Yield', jobId: 'a', leaseId: 'a:1', delayMs: 10 * SEC, deadAfterMs: 60 * SEC, name: 'ghost' }, T0 + 4 * SEC);
    spec.then(yielded('a', 'a:1', T0 + 4 * SEC, 0), released('a', 'a:1', 'yielded', T0 + 4 * SEC), cancelled('a', 'ops', T0 + 4 * SEC), promoted('b', 'b:2', T0 + 4 * SEC, 4 * SEC));
    expect(spec.state().jobs.a).toBeUndefined();
  });

  it('a cancelled job whose worker never answers is cancelled when its lease lapses', () => {
    given(...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 3 * SEC, true))
      .when({ type: 'ExpireLeases', jitter: 0 }, T0 + SEC + LEASE)
      .then(expired('a', 'a:1', T0 + SEC + LEASE, T0 + SEC + LEASE), cancelled('a', 'ops', T0 + SEC + LEASE), released('a', 'a:1', 'expired', T0 + SEC + LEASE), promoted('b', 'b:2', T0 + SEC + LEASE, SEC + LEASE));
  });

  it('a cancel of a job released (revoked) while it runs makes it a cancel; a second cancel records nothing', () => {
    given(...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 3 * SEC)).when({ type: 'Cancel', jobId: 'a', by: 'ops2' }).then(revoked('a', 'a:1', 'ops2', T0, true));
    given(...aRunningBParked, revoked('a', 'a:1', 'ops', T0 + 3 * SEC, true)).when({ type: 'Cancel', jobId: 'a', by: 'ops2' }).thenNothing();
  });

  it('cancels a holder nobody started, and hands its slot to the next parked job at once', () => {
    given(limitSet(1), enqueued(a), acquired('a', 'a:1'), enqueued(b), parked('b'))
      .when({ type: 'Cancel', jobId: 'a', by: 'ops' }, T0 + 3 * SEC)
      .then(cancelled('a', 'ops', T0 + 3 * SEC), released('a', 'a:1', 'cancelled', T0 + 3 * SEC), promoted('b', 'b:2', T0 + 3 * SEC, 3 * SEC));
  });

  it('cancels a parked job', () => {
    given(...aRunningBParked).when({ type: 'Cancel', jobId: 'b', by: 'ops' }).then(cancelled('b', 'ops', T0));
  });

  it('an unknown or finished job is refused', () => {
    given(...aRunningBParked).when({ type: 'Cancel', jobId: 'zz', by: 'ops' }).thenRefused({ tag: 'JobNotFound', jobId: 'zz' });
  });
});

/** a ran once and died (maxAttempts 1): it has left the key's state. */
const aDied = [
  limitSet(1),
  enqueued(job('a', { maxAttempts: 1 })),
  acquired('a', 'a:1'),
  started('a', 'a:1', T0 + SEC),
  failed('a', 'a:1', T0 + 2 * SEC, 1, 'boom', null),
  released('a', 'a:1', 'failed', T0 + 2 * SEC),
  dead('a', 'failed; no attempt left (1/1)', T0 + 2 * SEC),
];
const retryA = { type: 'RetryJob', jobId: 'a', by: 'alice', job: { queue: 'default', priority: 0, maxAttempts: 1, leaseMs: LEASE } } satisfies Command;
const retriedA = (at: number) => mk('JobRetried', { jobId: 'a', by: 'alice', queue: 'default', priority: 0, maxAttempts: 1, leaseMs: LEASE, at });

describe('RetryJob', () => {
  it('brings a dead job back with a fresh set of attempts: it takes the free slot under a new lease', () => {
    const step = given(...aDied).when(retryA, T0 + 9 * SEC);
    step.then(retriedA(T0 + 9 * SEC), acquired('a', 'a:2', T0 + 9 * SEC));
    expect(step.state().jobs.a).toMatchObject({ status: 'holding', attempts: 0, maxAttempts: 1 });
  });

  it('parks at the back of the line when the key is full: never over the limit', () => {
    const step = given(...aDied, enqueued(b), acquired('b', 'b:2'), enqueued(c), parked('c')).when(retryA, T0 + 9 * SEC);
    step.then(retriedA(T0 + 9 * SEC), parked('a', T0 + 9 * SEC));
    // c was enqueued after a, but a's retry is a new arrival: behind c.
    expect(parkedInOrder(step.state()).map((j) => j.jobId)).toEqual(['c', 'a']);
  });

  it('parks on a paused key', () => {
    given(...aDied, paused('ops', null)).when(retryA, T0 + 9 * SEC).then(retriedA(T0 + 9 * SEC), parked('a', T0 + 9 * SEC));
  });

  it('refuses a job the key still holds: it is not dead (a second retry finds the first)', () => {
    const once = [...aDied, retriedA(T0 + 9 * SEC), acquired('a', 'a:2', T0 + 9 * SEC)];
    given(...once).when(retryA).thenRefused({ tag: 'NotDead', jobId: 'a', status: 'holding' });
    given(...once, started('a', 'a:2', T0 + 10 * SEC)).when(retryA).thenRefused({ tag: 'NotDead', jobId: 'a', status: 'running' });
    given(...aRunningBParked).when({ ...retryA, jobId: 'b' }).thenRefused({ tag: 'NotDead', jobId: 'b', status: 'parked' });
  });
});

describe('DiscardDead', () => {
  it('records who dropped the dead job; it leaves the key\'s dead jobs, and nothing else of the state changes', () => {
    expect(fold(initialKeyState, aDied).dead).toEqual({ a: T0 + 2 * SEC });
    const step = given(...aDied).when({ type: 'DiscardDead', jobId: 'a', by: 'alice' }, T0 + 9 * SEC);
    step.then(mk('DeadDiscarded', { jobId: 'a', by: 'alice', at: T0 + 9 * SEC }));
    const { dead, ...rest } = fold(initialKeyState, aDied);
    expect(step.state()).toEqual(rest);
    expect(dead).toBeDefined();
  });

  it('issue 21 #5: a discard and a retry of one dead job exclude each other, whichever lands first', () => {
    const discarded = mk('DeadDiscarded', { jobId: 'a', by: 'bob', at: T0 + 9 * SEC });
    given(...aDied, discarded).when(retryA).thenRefused({ tag: 'NotDead', jobId: 'a', status: 'not dead (retried, discarded or never dead)' });
    given(...aDied, discarded).when({ type: 'DiscardDead', jobId: 'a', by: 'alice' }).thenRefused({ tag: 'NotDead', jobId: 'a', status: 'not dead (retried, discarded or never dead)' });
    given(...aDied, retriedA(T0 + 9 * SEC), acquired('a', 'a:2', T0 + 9 * SEC))
      .when({ type: 'DiscardDead', jobId: 'a', by: 'bob' })
      .thenRefused({ tag: 'NotDead', jobId: 'a', status: 'holding' });
  });

  it('issue 21 #5: a job retried, run and completed is not retried again by a second operator acting on the same dead job', () => {
    const done = [...aDied, retriedA(T0 + 9 * SEC), acquired('a', 'a:2', T0 + 9 * SEC), started('a', 'a:2', T0 + 10 * SEC), completed('a', 'a:2', T0 + 11 * SEC), released('a', 'a:2', 'completed', T0 + 11 * SEC)];
    given(...done).when(retryA).thenRefused({ tag: 'NotDead', jobId: 'a', status: 'not dead (retried, discarded or never dead)' });
  });

  it('refuses a job the key still holds', () => {
    given(...aRunningBParked).when({ type: 'DiscardDead', jobId: 'a', by: 'alice' }).thenRefused({ tag: 'NotDead', jobId: 'a', status: 'running' });
  });
});

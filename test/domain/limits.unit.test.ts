import * as E from 'fp-ts/lib/Either.js';
import { describe, expect, it } from 'vitest';
import { retryDelayMs } from '../../src/domain/backoff.js';
import type { JobSpec } from '../../src/domain/commands.js';
import { decide } from '../../src/domain/decide/index.js';
import { mk } from '../../src/domain/events.js';
import { fold, initialKeyState } from '../../src/domain/key-state.js';
import { keyStream } from '../../src/domain/streams.js';
import { givenAcross, limitHeld, limitLeft, limitReleased, limitWaiting, type Streams } from './spec-across.js';
import {
  LEASE,
  SEC,
  T0,
  acquired,
  cancelled,
  completed,
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
  replaced,
  resumed,
  revoked,
  scheduled,
  started,
} from './spec.js';

// Stacked limits: a job under further limit keys holds a slot in its own key and in each of them
// at once, or waits in all their lines. One spec per rule: each stream's history, a command on
// one stream, the events decided on every stream (or the refusal, and nothing anywhere).

const H1 = keyStream('h1');
const H2 = keyStream('h2');
const H3 = keyStream('h3');
const H4 = keyStream('h4');
const T = keyStream('t');
const U = keyStream('u');

/** A job under the limit keys `keys` (their limit left to the key's first use). */
const under = (jobId: string, keys: readonly string[], overrides: Partial<JobSpec> = {}): JobSpec =>
  job(jobId, { limits: keys.map((key) => ({ key })), ...overrides });

/** Home `home` (limit 1) where `j` holds lease `<id>:1`, started by w1 at T0 + 1 s when `start`. */
const holdingAt = (j: JobSpec, start = true) => [
  limitSet(1),
  enqueued(j),
  acquired(j.jobId, `${j.jobId}:1`),
  ...(start ? [started(j.jobId, `${j.jobId}:1`, T0 + SEC)] : []),
];
/** Home (limit 1) where `j` waits, parked at `at`. */
const parkedAt = (j: JobSpec, at = T0) => [limitSet(1), enqueued(j, at), parked(j.jobId, at)];

const a = under('a', ['t']);
const b = under('b', ['t']);
const c = under('c', ['t']);

describe('Enqueue under further limits', () => {
  it('is admitted when its key and every limit have room: SlotAcquired at home, LimitHeld under the same lease on each limit', () => {
    const j = job('a', { limits: [{ key: 't' }, { key: 'u', limit: 2 }] });
    givenAcross({ [H1]: [limitSet(2)] })
      .when({ type: 'Enqueue', job: j }, H1)
      .then({
        [H1]: [enqueued(j), acquired('a', 'a:1')],
        [T]: [limitSet(1), limitHeld('a', H1, ['t', 'u'], 'a:1')],
        [U]: [limitSet(2), limitHeld('a', H1, ['t', 'u'], 'a:1')],
      });
  });

  it("a limit key's first use records its KeyLimitSet (the job's limit, 1 when it names none); a later use naming none keeps it", () => {
    const first = job('a', { limits: [{ key: 't', limit: 3 }] });
    const step = givenAcross().when({ type: 'Enqueue', job: first }, H1);
    step.then({
      [H1]: [limitSet(1), enqueued(first), acquired('a', 'a:1')],
      [T]: [limitSet(3), limitHeld('a', H1, ['t'], 'a:1')],
    });
    givenAcross(step.history())
      .when({ type: 'Enqueue', job: b }, H2, T0 + SEC)
      .then({
        [H2]: [limitSet(1, T0 + SEC), enqueued(b, T0 + SEC), acquired('b', 'b:1', T0 + SEC)],
        [T]: [limitHeld('b', H2, ['t'], 'b:1', T0 + SEC)],
      });
  });

  it('parks in every line when one limit is full: JobParked at home and LimitWaiting on each limit, the free one too', () => {
    const j = under('b', ['t', 'u']);
    givenAcross({
      [H2]: holdingAt(under('x', ['t'])),
      [T]: [limitSet(1), limitHeld('x', H2, ['t'], 'x:1')],
      [U]: [limitSet(1)],
    })
      .when({ type: 'Enqueue', job: j }, H1, T0 + SEC)
      .then({
        [H1]: [limitSet(1, T0 + SEC), enqueued(j, T0 + SEC), parked('b', T0 + SEC)],
        [T]: [limitWaiting('b', H1, ['t', 'u'], 0, T0 + SEC)],
        [U]: [limitWaiting('b', H1, ['t', 'u'], 0, T0 + SEC)],
      });
  });

  it('parks in every line when its own key is full though the limits have room', () => {
    givenAcross({ [H1]: holdingAt(job('x')), [T]: [limitSet(1)] })
      .when({ type: 'Enqueue', job: b }, H1, T0 + SEC)
      .then({ [H1]: [enqueued(b, T0 + SEC), parked('b', T0 + SEC)], [T]: [limitWaiting('b', H1, ['t'], 0, T0 + SEC)] });
  });

  it('a batch is admitted job by job against the shared limit', () => {
    givenAcross()
      .when({ type: 'EnqueueMany', limit: 2, jobs: [a, b] }, H1)
      .then({
        [H1]: [limitSet(2), enqueued(a), acquired('a', 'a:1'), enqueued(b), parked('b')],
        [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('b', H1, ['t'])],
      });
  });

  it('a job due later holds and waits nowhere until due; then it is admitted on every stream at once', () => {
    const later = under('later', ['t'], { runAt: T0 + 10 * SEC });
    const step = givenAcross({ [T]: [limitSet(1)] }).when({ type: 'Enqueue', job: later }, H1);
    step.then({ [H1]: [limitSet(1), enqueued(later), scheduled('later', T0 + 10 * SEC)] });
    givenAcross(step.history())
      .when({ type: 'AdmitDue' }, H1, T0 + 10 * SEC)
      .then({ [H1]: [acquired('later', 'later:1', T0 + 10 * SEC)], [T]: [limitHeld('later', H1, ['t'], 'later:1', T0 + 10 * SEC)] });
  });

  it('a limit key keeps its limit: an enqueue naming another is refused, naming the key, and nothing is written anywhere (the new home key neither)', () => {
    const history: Streams = { [H2]: holdingAt(under('x', ['t'])), [T]: [limitSet(1), limitHeld('x', H2, ['t'], 'x:1')] };
    givenAcross(history)
      .when({ type: 'Enqueue', job: job('b', { limits: [{ key: 'u' }, { key: 't', limit: 2 }] }) }, H1, T0 + SEC)
      .thenRefused({ tag: 'LimitMismatch', recorded: 1, requested: 2, key: 't' });
    // In a batch, the second job's mismatch refuses the first one's admission too.
    givenAcross(history)
      .when({ type: 'EnqueueMany', jobs: [under('c', ['u']), job('b', { limits: [{ key: 't', limit: 2 }] })] }, H1, T0 + SEC)
      .thenRefused({ tag: 'LimitMismatch', recorded: 1, requested: 2, key: 't' });
  });

  it('an enqueue naming the recorded limit is admitted as usual', () => {
    givenAcross({ [T]: [limitSet(2)] })
      .when({ type: 'Enqueue', job: job('b', { limits: [{ key: 't', limit: 2 }] }) }, H1)
      .then({ [H1]: [limitSet(1), enqueued(job('b', { limits: [{ key: 't', limit: 2 }] })), acquired('b', 'b:1')], [T]: [limitHeld('b', H1, ['t'], 'b:1')] });
  });

  it('an enqueue that owns the limit changes it, and a raise promotes the limit key\'s waiters of other homes first', () => {
    const y = under('y', ['t']);
    const j = job('b', { limits: [{ key: 't', limit: 2 }] });
    givenAcross({
      [H2]: holdingAt(under('x', ['t'])),
      [H3]: parkedAt(y),
      [T]: [limitSet(1), limitHeld('x', H2, ['t'], 'x:1'), limitWaiting('y', H3, ['t'])],
    })
      .when({ type: 'Enqueue', ownsLimit: true, job: j }, H1, T0 + SEC)
      .then({
        [T]: [limitSet(2, T0 + SEC), limitHeld('y', H3, ['t'], 'y:1', T0 + SEC, SEC), limitWaiting('b', H1, ['t'], 0, T0 + SEC)],
        [H3]: [promoted('y', 'y:1', T0 + SEC, SEC)],
        [H1]: [limitSet(1, T0 + SEC), enqueued(j, T0 + SEC), parked('b', T0 + SEC)],
      });
  });

  it('whenFull reject names the full limit, and the job waits nowhere', () => {
    const j = under('b', ['t'], { whenFull: 'reject' });
    givenAcross({ [H2]: holdingAt(under('x', ['t'])), [T]: [limitSet(1), limitHeld('x', H2, ['t'], 'x:1')] })
      .when({ type: 'Enqueue', job: j }, H1)
      .then({ [H1]: [limitSet(1), enqueued(j), rejected('b', 'limit t full (limit 1)')] });
  });

  it('whenFull reject names a paused limit', () => {
    const j = under('b', ['t'], { whenFull: 'reject' });
    givenAcross({ [T]: [limitSet(1), paused('op', null)] })
      .when({ type: 'Enqueue', job: j }, H1)
      .then({ [H1]: [limitSet(1), enqueued(j), rejected('b', 'limit t paused')] });
  });

  it("whenFull replace drops the parked job of its name from every line (LimitLeft) and waits in its place", () => {
    const r1 = under('r1', ['t'], { name: 'digest', whenFull: 'replace' });
    const r2 = under('r2', ['t'], { name: 'digest', whenFull: 'replace' });
    givenAcross({
      [H1]: [...holdingAt(job('x')), enqueued(r1), parked('r1')],
      [T]: [limitSet(1), limitWaiting('r1', H1, ['t'])],
    })
      .when({ type: 'Enqueue', job: r2 }, H1, T0 + SEC)
      .then({
        [H1]: [enqueued(r2, T0 + SEC), replaced('r1', 'r2', T0 + SEC), parked('r2', T0 + SEC)],
        [T]: [limitLeft('r1', 'replaced by r2', T0 + SEC), limitWaiting('r2', H1, ['t'], 0, T0 + SEC)],
      });
  });
});

describe('a holder under further limits', () => {
  const now = T0 + 10 * SEC;

  it('Start and Renew act at home only', () => {
    const history: Streams = { [H1]: holdingAt(a, false), [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1')] };
    givenAcross(history)
      .when({ type: 'Start', jobId: 'a', leaseId: 'a:1', workerId: 'w1' }, H1, T0 + SEC)
      .then({ [H1]: [started('a', 'a:1', T0 + SEC)] });
  });

  it("Complete releases its slot everywhere and promotes the waiter of ANOTHER home whose limits now all have room", () => {
    givenAcross({
      [H1]: holdingAt(a),
      [H2]: parkedAt(b, T0 + SEC),
      [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('b', H2, ['t'], 0, T0 + SEC)],
    })
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, H1, now)
      .then({
        [H1]: [completed('a', 'a:1', now), released('a', 'a:1', 'completed', now)],
        [T]: [limitReleased('a', 'a:1', 'completed', now), limitHeld('b', H2, ['t'], 'b:1', now, 9 * SEC)],
        [H2]: [promoted('b', 'b:1', now, 9 * SEC)],
      });
  });

  it('a waiter blocked by a still-full limit is passed over, and the next eligible one is promoted', () => {
    const bTU = under('b', ['t', 'u']);
    givenAcross({
      [H1]: holdingAt(a),
      [H4]: holdingAt(under('d', ['u'])),
      [H2]: parkedAt(bTU),
      [H3]: parkedAt(c, T0 + SEC),
      [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('b', H2, ['t', 'u']), limitWaiting('c', H3, ['t'], 0, T0 + SEC)],
      [U]: [limitSet(1), limitHeld('d', H4, ['u'], 'd:1'), limitWaiting('b', H2, ['t', 'u'])],
    })
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, H1, now)
      .then({
        [H1]: [completed('a', 'a:1', now), released('a', 'a:1', 'completed', now)],
        [T]: [limitReleased('a', 'a:1', 'completed', now), limitHeld('c', H3, ['t'], 'c:1', now, 9 * SEC)],
        [H3]: [promoted('c', 'c:1', now, 9 * SEC)],
      });
  });

  it('a waiter under two full limits is promoted when the last of them frees, from that key\'s line', () => {
    const bTU = under('b', ['t', 'u']);
    const first = givenAcross({
      [H1]: holdingAt(a),
      [H4]: holdingAt(under('d', ['u'])),
      [H2]: parkedAt(bTU),
      [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('b', H2, ['t', 'u'])],
      [U]: [limitSet(1), limitHeld('d', H4, ['u'], 'd:1'), limitWaiting('b', H2, ['t', 'u'])],
    }).when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, H1, now);
    // t frees, but u is still full: b waits on.
    first.then({ [H1]: [completed('a', 'a:1', now), released('a', 'a:1', 'completed', now)], [T]: [limitReleased('a', 'a:1', 'completed', now)] });
    givenAcross(first.history())
      .when({ type: 'Complete', jobId: 'd', leaseId: 'd:1' }, H4, now + SEC)
      .then({
        [H4]: [completed('d', 'd:1', now + SEC), released('d', 'd:1', 'completed', now + SEC)],
        [U]: [limitReleased('d', 'd:1', 'completed', now + SEC), limitHeld('b', H2, ['t', 'u'], 'b:1', now + SEC, 11 * SEC)],
        [T]: [limitHeld('b', H2, ['t', 'u'], 'b:1', now + SEC, 11 * SEC)],
        [H2]: [promoted('b', 'b:1', now + SEC, 11 * SEC)],
      });
  });

  it("promotion follows the freed key's line: lowest priority number first, then the order jobs joined that line", () => {
    const slow = under('b', ['t'], { priority: 5 });
    const c1 = under('c', ['t'], { priority: 1 });
    const d1 = under('d', ['t'], { priority: 1 });
    givenAcross({
      [H1]: holdingAt(a),
      [H2]: parkedAt(slow),
      // d was enqueued at its home before c, but joined t's line after it.
      [H4]: parkedAt(d1, T0),
      [H3]: parkedAt(c1, T0),
      [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('b', H2, ['t'], 5), limitWaiting('c', H3, ['t'], 1), limitWaiting('d', H4, ['t'], 1)],
    })
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, H1, now)
      .then({
        [H1]: [completed('a', 'a:1', now), released('a', 'a:1', 'completed', now)],
        [T]: [limitReleased('a', 'a:1', 'completed', now), limitHeld('c', H3, ['t'], 'c:1', now, 10 * SEC, 1)],
        [H3]: [promoted('c', 'c:1', now, 10 * SEC)],
      });
  });

  it('a paused limit key holds its freed slot back from its waiters', () => {
    givenAcross({
      [H1]: holdingAt(a),
      [H2]: parkedAt(b),
      [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('b', H2, ['t']), paused('op', null)],
    })
      .when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, H1, now)
      .then({ [H1]: [completed('a', 'a:1', now), released('a', 'a:1', 'completed', now)], [T]: [limitReleased('a', 'a:1', 'completed', now)] });
  });

  // The holder a of h1 is under t and u; c of h3 waits for t.
  const aTU = under('a', ['t', 'u']);
  const multi: Streams = {
    [H1]: holdingAt(aTU),
    [H3]: parkedAt(c),
    [T]: [limitSet(1), limitHeld('a', H1, ['t', 'u'], 'a:1'), limitWaiting('c', H3, ['t'])],
    [U]: [limitSet(1), limitHeld('a', H1, ['t', 'u'], 'a:1')],
  };

  it('ExpireLeases reclaims it on every stream, schedules its retry, and serves the freed lines', () => {
    const at = T0 + SEC + LEASE;
    givenAcross(multi)
      .when({ type: 'ExpireLeases', jitter: 0 }, H1, at)
      .then({
        [H1]: [expired('a', 'a:1', at, at), released('a', 'a:1', 'expired', at), scheduled('a', at + retryDelayMs(1, 0), at)],
        [T]: [limitReleased('a', 'a:1', 'expired', at), limitHeld('c', H3, ['t'], 'c:1', at, at - T0)],
        [U]: [limitReleased('a', 'a:1', 'expired', at)],
        [H3]: [promoted('c', 'c:1', at, at - T0)],
      });
  });

  it('ExpireLeases before the lease ran out changes nothing anywhere', () => {
    givenAcross(multi).when({ type: 'ExpireLeases', jitter: 0 }, H1, T0 + SEC + LEASE - 1).thenNothing();
  });

  it('RevokeLease of a started holder frees none of its slots: the handler may still run', () => {
    givenAcross(multi).when({ type: 'RevokeLease', by: 'op', jitter: 0, jobId: 'a' }, H1, now).then({ [H1]: [revoked('a', 'a:1', 'op', now)] });
  });

  it('once its handler stopped, a revoked holder releases it everywhere and schedules its retry', () => {
    givenAcross({ ...multi, [H1]: [...multi[H1]!, revoked('a', 'a:1', 'op', now - SEC)] })
      .when({ type: 'Stopped', jobId: 'a', leaseId: 'a:1', jitter: 0 }, H1, now)
      .then({
        [H1]: [released('a', 'a:1', 'revoked', now), scheduled('a', now + retryDelayMs(1, 0), now)],
        [T]: [limitReleased('a', 'a:1', 'revoked', now), limitHeld('c', H3, ['t'], 'c:1', now, 10 * SEC)],
        [U]: [limitReleased('a', 'a:1', 'revoked', now)],
        [H3]: [promoted('c', 'c:1', now, 10 * SEC)],
      });
  });

  it('Fail with an attempt left releases it everywhere, schedules the retry, and serves the freed lines', () => {
    const retryAt = now + retryDelayMs(1, 0);
    givenAcross(multi)
      .when({ type: 'Fail', jobId: 'a', leaseId: 'a:1', error: 'boom', jitter: 0 }, H1, now)
      .then({
        [H1]: [failed('a', 'a:1', now, 1, 'boom', retryAt), released('a', 'a:1', 'failed', now), scheduled('a', retryAt, now)],
        [T]: [limitReleased('a', 'a:1', 'failed', now), limitHeld('c', H3, ['t'], 'c:1', now, 10 * SEC)],
        [U]: [limitReleased('a', 'a:1', 'failed', now)],
        [H3]: [promoted('c', 'c:1', now, 10 * SEC)],
      });
  });

  it('Yield with a delay gives its slots back everywhere (the attempt too) and is scheduled, holding and waiting nowhere', () => {
    givenAcross(multi)
      .when({ type: 'Yield', jobId: 'a', leaseId: 'a:1', delayMs: 5 * SEC, reason: 'no handler' }, H1, now)
      .then({
        [H1]: [
          mk('JobYielded', { jobId: 'a', leaseId: 'a:1', attempts: 0, reason: 'no handler', retryAt: now + 5 * SEC, at: now }),
          released('a', 'a:1', 'yielded', now),
          scheduled('a', now + 5 * SEC, now),
        ],
        [T]: [limitReleased('a', 'a:1', 'yielded', now), limitHeld('c', H3, ['t'], 'c:1', now, 10 * SEC)],
        [U]: [limitReleased('a', 'a:1', 'yielded', now)],
        [H3]: [promoted('c', 'c:1', now, 10 * SEC)],
      });
  });

  it('Yield at shutdown waits in every line again; a job ahead of it at home takes the home slot', () => {
    const p = job('p', { priority: -1 });
    givenAcross({
      [H1]: [...holdingAt(aTU), enqueued(p), parked('p')],
      [T]: [limitSet(1), limitHeld('a', H1, ['t', 'u'], 'a:1')],
      [U]: [limitSet(1), limitHeld('a', H1, ['t', 'u'], 'a:1')],
    })
      .when({ type: 'Yield', jobId: 'a', leaseId: 'a:1' }, H1, now)
      .then({
        [H1]: [
          mk('JobYielded', { jobId: 'a', leaseId: 'a:1', attempts: 0, at: now }),
          released('a', 'a:1', 'yielded', now),
          parked('a', now),
          promoted('p', 'p:2', now, 10 * SEC),
        ],
        [T]: [limitReleased('a', 'a:1', 'yielded', now), limitWaiting('a', H1, ['t', 'u'], 0, now)],
        [U]: [limitReleased('a', 'a:1', 'yielded', now), limitWaiting('a', H1, ['t', 'u'], 0, now)],
      });
  });

  it('Cancel of a running holder frees none of its slots until its handler stopped; then it releases it everywhere and serves the freed lines', () => {
    givenAcross(multi).when({ type: 'Cancel', jobId: 'a', by: 'op' }, H1, now).then({ [H1]: [revoked('a', 'a:1', 'op', now, true)] });
    givenAcross({ ...multi, [H1]: [...multi[H1]!, revoked('a', 'a:1', 'op', now - SEC, true)] })
      .when({ type: 'Stopped', jobId: 'a', leaseId: 'a:1', jitter: 0 }, H1, now)
      .then({
        [H1]: [cancelled('a', 'op', now), released('a', 'a:1', 'cancelled', now)],
        [T]: [limitReleased('a', 'a:1', 'cancelled', now), limitHeld('c', H3, ['t'], 'c:1', now, 10 * SEC)],
        [U]: [limitReleased('a', 'a:1', 'cancelled', now)],
        [H3]: [promoted('c', 'c:1', now, 10 * SEC)],
      });
  });
});

describe('a parked job under further limits', () => {
  const bTU = under('b', ['t', 'u']);
  const waiting: Streams = {
    [H1]: [...holdingAt(job('x')), enqueued(bTU), parked('b')],
    [T]: [limitSet(1), limitWaiting('b', H1, ['t', 'u'])],
    [U]: [limitSet(1), limitWaiting('b', H1, ['t', 'u'])],
  };

  it('Cancel leaves every line (LimitLeft)', () => {
    givenAcross(waiting)
      .when({ type: 'Cancel', jobId: 'b', by: 'op' }, H1, T0 + SEC)
      .then({ [H1]: [cancelled('b', 'op', T0 + SEC)], [T]: [limitLeft('b', 'cancelled by op', T0 + SEC)], [U]: [limitLeft('b', 'cancelled by op', T0 + SEC)] });
  });

  it('DiscardParked (named, or all) leaves every line (LimitLeft)', () => {
    const then = { [H1]: [discarded('b', 'op', T0 + SEC)], [T]: [limitLeft('b', 'discarded by op', T0 + SEC)], [U]: [limitLeft('b', 'discarded by op', T0 + SEC)] };
    givenAcross(waiting).when({ type: 'DiscardParked', by: 'op', jobIds: ['b'] }, H1, T0 + SEC).then(then);
    givenAcross(waiting).when({ type: 'DiscardParked', by: 'op' }, H1, T0 + SEC).then(then);
  });

  it('its home slot freeing promotes it on every stream at once', () => {
    givenAcross({ ...waiting, [H1]: [...holdingAt(job('x')), enqueued(bTU), parked('b')] })
      .when({ type: 'Complete', jobId: 'x', leaseId: 'x:1' }, H1, T0 + 10 * SEC)
      .then({
        [H1]: [completed('x', 'x:1', T0 + 10 * SEC), released('x', 'x:1', 'completed', T0 + 10 * SEC), promoted('b', 'b:2', T0 + 10 * SEC, 10 * SEC)],
        [T]: [limitHeld('b', H1, ['t', 'u'], 'b:2', T0 + 10 * SEC, 10 * SEC)],
        [U]: [limitHeld('b', H1, ['t', 'u'], 'b:2', T0 + 10 * SEC, 10 * SEC)],
      });
  });
});

describe('pausing a limit key', () => {
  it('a paused limit key admits none of its guests: the job parks in every line', () => {
    givenAcross({ [T]: [limitSet(1), paused('op', 'maintenance')] })
      .when({ type: 'Enqueue', job: b }, H1, T0 + SEC)
      .then({ [H1]: [limitSet(1, T0 + SEC), enqueued(b, T0 + SEC), parked('b', T0 + SEC)], [T]: [limitWaiting('b', H1, ['t'], 0, T0 + SEC)] });
  });

  it('PauseKey on a limit key records only the pause there', () => {
    givenAcross({ [T]: [limitSet(1)] })
      .when({ type: 'PauseKey', by: 'op' }, T)
      .then({ [T]: [paused('op', null)] });
  });

  it('ResumeKey promotes its waiters whose other streams have room, at their homes', () => {
    givenAcross({
      [H1]: parkedAt(b),
      [H2]: [...holdingAt(job('x')), enqueued(c), parked('c')],
      [T]: [limitSet(2), paused('op', null), limitWaiting('b', H1, ['t']), limitWaiting('c', H2, ['t'])],
    })
      .when({ type: 'ResumeKey', by: 'op' }, T, T0 + 10 * SEC)
      .then({
        // c's own key is full: it is passed over, and t keeps a free slot.
        [T]: [resumed('op', null, T0 + 10 * SEC), limitHeld('b', H1, ['t'], 'b:1', T0 + 10 * SEC, 10 * SEC)],
        [H1]: [promoted('b', 'b:1', T0 + 10 * SEC, 10 * SEC)],
      });
  });
});

describe("operators' commands on a limit key naming a guest", () => {
  const guests: Streams = {
    [H1]: holdingAt(a),
    [H2]: parkedAt(b),
    [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('b', H2, ['t'])],
  };

  it('are refused as HeldElsewhere, naming its home, and change nothing', () => {
    const heldElsewhere = (jobId: string, home: string) => ({ tag: 'HeldElsewhere' as const, jobId, home });
    givenAcross(guests).when({ type: 'Cancel', jobId: 'a', by: 'op' }, T).thenRefused(heldElsewhere('a', H1));
    givenAcross(guests).when({ type: 'Cancel', jobId: 'b', by: 'op' }, T).thenRefused(heldElsewhere('b', H2));
    givenAcross(guests).when({ type: 'RevokeLease', by: 'op', jitter: 0, jobId: 'a' }, T).thenRefused(heldElsewhere('a', H1));
    givenAcross(guests).when({ type: 'DiscardParked', by: 'op', jobIds: ['b'] }, T).thenRefused(heldElsewhere('b', H2));
    givenAcross(guests).when({ type: 'Start', jobId: 'a', leaseId: 'a:1', workerId: 'w1' }, T).thenRefused(heldElsewhere('a', H1));
    givenAcross(guests).when({ type: 'Renew', jobId: 'a', leaseId: 'a:1' }, T).thenRefused(heldElsewhere('a', H1));
    givenAcross(guests).when({ type: 'Complete', jobId: 'a', leaseId: 'a:1' }, T).thenRefused(heldElsewhere('a', H1));
    givenAcross(guests).when({ type: 'Fail', jobId: 'a', leaseId: 'a:1', error: 'x', jitter: 0 }, T).thenRefused(heldElsewhere('a', H1));
    givenAcross(guests).when({ type: 'Yield', jobId: 'a', leaseId: 'a:1' }, T).thenRefused(heldElsewhere('a', H1));
  });

  it('revoking or discarding all, or expiring leases, on the limit key passes its guests by', () => {
    givenAcross(guests).when({ type: 'RevokeLease', by: 'op', jitter: 0 }, T).thenNothing();
    givenAcross(guests).when({ type: 'DiscardParked', by: 'op' }, T).thenNothing();
    givenAcross(guests).when({ type: 'ExpireLeases', jitter: 0 }, T, T0 + 24 * 3_600_000).thenNothing();
  });
});

describe('FillSlots', () => {
  it('on a key with nothing to do emits nothing (a new key, a key with free slots and no line, a line blocked elsewhere)', () => {
    givenAcross().when({ type: 'FillSlots' }, H1).thenNothing();
    givenAcross({ [H1]: [limitSet(2)] }).when({ type: 'FillSlots' }, H1).thenNothing();
    givenAcross({ [H1]: [...holdingAt(job('x')), enqueued(b), parked('b')], [T]: [limitSet(1), limitWaiting('b', H1, ['t'])] })
      .when({ type: 'FillSlots' }, T)
      .thenNothing();
  });

  // A release decided without b's home at hand: t's slot is free, and b still waits in its line.
  const unserved: Streams = {
    [H1]: [...holdingAt(a), completed('a', 'a:1', T0 + 2 * SEC), released('a', 'a:1', 'completed', T0 + 2 * SEC)],
    [H2]: parkedAt(b),
    [T]: [limitSet(1), limitHeld('a', H1, ['t'], 'a:1'), limitWaiting('b', H2, ['t']), limitReleased('a', 'a:1', 'completed', T0 + 2 * SEC)],
  };

  it("serves a limit key's line left unserved: its waiter is promoted at home", () => {
    givenAcross(unserved)
      .when({ type: 'FillSlots' }, T, T0 + 3 * SEC)
      .then({ [H2]: [promoted('b', 'b:1', T0 + 3 * SEC, 3 * SEC)], [T]: [limitHeld('b', H2, ['t'], 'b:1', T0 + 3 * SEC, 3 * SEC)] });
  });

  it('serves the line from `after` only', () => {
    // On t, a joined first (seq 0) and b second (seq 1).
    givenAcross(unserved).when({ type: 'FillSlots', after: { priority: 0, seq: 1 } }, T, T0 + 3 * SEC).thenNothing();
    givenAcross(unserved)
      .when({ type: 'FillSlots', after: { priority: 0, seq: 0 } }, T, T0 + 3 * SEC)
      .then({ [H2]: [promoted('b', 'b:1', T0 + 3 * SEC, 3 * SEC)], [T]: [limitHeld('b', H2, ['t'], 'b:1', T0 + 3 * SEC, 3 * SEC)] });
  });

  it('is harmless once the line was served', () => {
    const served = givenAcross(unserved).when({ type: 'FillSlots' }, T, T0 + 3 * SEC).history();
    givenAcross(served).when({ type: 'FillSlots' }, T, T0 + 4 * SEC).thenNothing();
    givenAcross(served).when({ type: 'FillSlots' }, H2, T0 + 4 * SEC).thenNothing();
  });
});

describe('a job without further limits', () => {
  const x = job('x');
  const y = job('y');
  const history = [limitSet(1), enqueued(x), acquired('x', 'x:1'), enqueued(y), parked('y'), started('x', 'x:1', T0 + SEC)];

  it('is decided across streams exactly as by the single-key decider', () => {
    const now = T0 + 10 * SEC;
    const complete = { type: 'Complete' as const, jobId: 'x', leaseId: 'x:1' };
    givenAcross({ [H1]: history })
      .when(complete, H1, now)
      .then({ [H1]: [completed('x', 'x:1', now), released('x', 'x:1', 'completed', now), promoted('y', 'y:2', now, 10 * SEC)] });
    given(...history).when(complete, now).then(completed('x', 'x:1', now), released('x', 'x:1', 'completed', now), promoted('y', 'y:2', now, 10 * SEC));
    givenAcross({ [H1]: [limitSet(1), enqueued(x), acquired('x', 'x:1')] })
      .when({ type: 'Enqueue', limit: 1, job: y }, H1, T0 + SEC)
      .then({ [H1]: [enqueued(y, T0 + SEC), parked('y', T0 + SEC)] });
    const single = decide({ type: 'Enqueue', limit: 1, job: y }, fold(initialKeyState, [limitSet(1), enqueued(x), acquired('x', 'x:1')]), T0 + SEC);
    // Decided alone, the wait records its line whole: the key's one slot held.
    expect(single).toEqual(E.right([enqueued(y, T0 + SEC), parked('y', T0 + SEC, { limit: 1, holding: 1, paused: false })]));
  });
});

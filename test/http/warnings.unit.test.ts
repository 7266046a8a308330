import { describe, expect, it } from 'vitest';
import { UNSTARTED_WARNING_MS, warningsOf } from '../../src/adapters/http/routes/keys.js';
import type { KeyRow } from '../../src/adapters/postgres/queries/list-keys.js';
import type { QueueRow } from '../../src/adapters/postgres/queries/queues.js';

// The overview's warnings (GET /api/keys): holders nobody starts, holders whose worker is gone,
// queues with messages and no live consumer.

const NOW = Date.UTC(2026, 11, 1, 12);
const key = (key: string, over: Partial<KeyRow>): KeyRow => ({
  key,
  limit: 2,
  inUse: 0,
  parked: 0,
  scheduled: 0,
  oldestParkedAt: null,
  nextLeaseExpiry: null,
  leaseState: 'none',
  holderStates: { running: 0, unstarted: 0, expired: 0, workerGone: 0 },
  oldestUnstartedAt: null,
  atLimit: false,
  quarantine: null,
  paused: null,
  ...over,
});
const queue = (name: string, depth: number, consumers: number): QueueRow => ({ queue: name, depth, visibleNow: depth, oldestAgeMs: depth > 0 ? 1_000 : null, consumers, capacity: consumers * 10 });

describe('warningsOf', () => {
  it('warns of holders unstarted for longer than the threshold, not of those admitted just now', () => {
    const unstarted = (since: number) => ({ holderStates: { running: 0, unstarted: 2, expired: 0, workerGone: 0 }, oldestUnstartedAt: since });
    expect(warningsOf([key('fresh', unstarted(NOW - UNSTARTED_WARNING_MS))], [], NOW)).toEqual([]);
    expect(warningsOf([key('stuck', unstarted(NOW - UNSTARTED_WARNING_MS - 1_000))], [], NOW)).toEqual([
      { kind: 'holders-unstarted', key: 'stuck', count: 2, since: NOW - UNSTARTED_WARNING_MS - 1_000, message: 'stuck: 2 holders admitted and not started, the oldest for 31 s' },
    ]);
  });

  it('warns of holders whose worker is gone, and of queues with messages and no consumer; keys first, then queues', () => {
    const keys = [key('a', { holderStates: { running: 1, unstarted: 0, expired: 0, workerGone: 1 } }), key('b', { holderStates: { running: 3, unstarted: 0, expired: 0, workerGone: 0 } })];
    expect(warningsOf(keys, [queue('empty', 0, 0), queue('idle', 3, 0), queue('read', 5, 1)], NOW)).toEqual([
      { kind: 'holders-worker-gone', key: 'a', count: 1, message: 'a: 1 holder whose worker is gone: nobody runs it until the sweeper reclaims the lease at its expiry' },
      { kind: 'queue-without-consumer', queue: 'idle', depth: 3, oldestAgeMs: 1_000, message: 'queue idle: 3 messages and no live worker reading it' },
    ]);
  });
});

import { describe, expect, it } from 'vitest';
import { warningsOf } from '../../src/adapters/http/routes/warnings.js';
import type { AttentionGroup } from '../../src/adapters/postgres/queries/key-page.js';
import type { QueueRow } from '../../src/adapters/postgres/queries/queues.js';

// The overview's warnings (GET /api/keys), one per cause from the groups the database made:
// queues with messages and no live consumer first, then holders nobody starts, holders whose
// worker is gone, leases run out, quarantined keys.

const NOW = Date.UTC(2026, 11, 1, 12);
const queue = (name: string, depth: number, consumers: number): QueueRow => ({
  queue: name,
  depth,
  visibleNow: depth,
  oldestAgeMs: depth > 0 ? 1_000 : null,
  oldestAt: depth > 0 ? NOW - 1_000 : null,
  consumers,
  capacity: consumers * 10,
});
const group = (cause: AttentionGroup['cause'], keys: string[], count = keys.length): AttentionGroup => ({
  cause,
  count,
  holders: count * 2,
  since: cause === 'holders-unstarted' ? NOW - 40_000 : null,
  first: keys.map((key) => ({ key, count: 2, since: cause === 'holders-unstarted' ? NOW - 40_000 : null })),
});

describe('warningsOf', () => {
  it('no cause, no warning: an empty queue or one with a consumer is no cause', () => {
    expect(warningsOf({ attention: [], unstartedQueues: [] }, [queue('empty', 0, 0), queue('read', 5, 1)])).toEqual([]);
  });

  it('one key: the key named, its holders counted', () => {
    expect(warningsOf({ attention: [group('holders-worker-gone', ['a'])], unstartedQueues: [] }, [])).toEqual([
      { kind: 'holders-worker-gone', count: 1, holders: 2, keys: [{ key: 'a', count: 2 }], message: 'a: 2 holders whose worker is gone: nobody runs them until the sweeper reclaims the lease at its expiry' },
    ]);
  });

  it("many keys: one warning with the count and the first few, the queue nobody reads first, named as the unstarted holders' reason", () => {
    const attention = [group('holders-unstarted', ['k1', 'k2', 'k3', 'k4', 'k5'], 5_000), group('key-quarantined', ['q'])];
    const warnings = warningsOf({ attention, unstartedQueues: ['nobody', 'read'] }, [queue('nobody', 5_000, 0), queue('read', 5, 1)]);
    expect(warnings.map((w) => w.kind)).toEqual(['queue-without-consumer', 'holders-unstarted', 'key-quarantined']);
    expect(warnings[0]).toEqual({ kind: 'queue-without-consumer', count: 1, queues: [{ queue: 'nobody', depth: 5_000, oldestAt: NOW - 1_000 }], message: 'queue nobody: 5000 messages and no live worker reading it' });
    expect(warnings[1]).toMatchObject({
      count: 5_000,
      holders: 10_000,
      since: NOW - 40_000,
      keys: [{ key: 'k1', count: 2, since: NOW - 40_000 }, ...['k2', 'k3', 'k4', 'k5'].map((key) => expect.objectContaining({ key }))],
      unreadQueues: ['nobody'],
      message: '5000 keys with holders admitted and not started for over 30 s (10000 holders): k1, k2, k3, k4, k5, and 4995 more; they wait on queue nobody, which no live worker reads',
    });
    expect(warnings[2]).toMatchObject({ count: 1, keys: [{ key: 'q', count: 2 }] });
  });

  it('many queues: one warning, the first few named with their depth', () => {
    const queues = ['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((name, i) => queue(name, i + 1, 0));
    const [warning] = warningsOf({ attention: [], unstartedQueues: [] }, queues);
    expect(warning).toMatchObject({ kind: 'queue-without-consumer', count: 7, message: '7 queues with messages and no live worker reading them: a (1), b (2), c (3), d (4), e (5), and 2 more' });
    expect(warning?.kind === 'queue-without-consumer' && warning.queues.map((q) => q.queue)).toEqual(['a', 'b', 'c', 'd', 'e']);
  });
});

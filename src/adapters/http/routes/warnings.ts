import type { AttentionGroup, KeyPage } from '../../postgres/queries/key-page.js';
import { LISTED_PER_WARNING } from '../../postgres/queries/key-page-options.js';
import type { QueueRow } from '../../postgres/queries/queues.js';

// The overview's "needs attention": one warning per cause, however many keys it touches, each
// with how many and the first few (the database groups the keys: src/adapters/postgres/queries/
// key-page.ts), the queue-level cause first, since a queue nobody reads explains why its keys'
// holders are not started.

/**
 * A holder admitted and not started for longer than this is warned about: with a live worker on
 * its queue a start follows its admission within a poll (1 s by default), and a message read but
 * not started becomes visible again after 30 s (the workers' default visibility), so past that
 * nobody is taking it.
 */
export const UNSTARTED_WARNING_MS = 30_000;

export interface WarnedKey {
  readonly key: string;
  /** Its holders in the warning's state (0 for a quarantined key). */
  readonly count: number;
}

export interface WarnedQueue {
  readonly queue: string;
  readonly depth: number;
  /** When its oldest waiting admission was made; null when every message is running. */
  readonly oldestAt: number | null;
}

/**
 * What the overview warns of, with the figures a page needs to say it in its own words (`message`:
 * in English). `count`: keys (queues for queue-without-consumer) with the cause; `keys`/`queues`:
 * the first LISTED_PER_WARNING of them, worst first; `holders`: their holders in that state.
 */
export type Warning =
  | { readonly kind: 'queue-without-consumer'; readonly count: number; readonly queues: readonly WarnedQueue[]; readonly message: string }
  | {
      readonly kind: 'holders-unstarted';
      readonly count: number;
      readonly holders: number;
      /** When the longest-waiting of them was admitted. */
      readonly since: number;
      readonly keys: readonly (WarnedKey & { readonly since: number })[];
      /** The queues they wait on that no live worker reads (each warned of above). */
      readonly unreadQueues: readonly string[];
      readonly message: string;
    }
  | { readonly kind: 'holders-worker-gone' | 'holders-expired'; readonly count: number; readonly holders: number; readonly keys: readonly WarnedKey[]; readonly message: string }
  | { readonly kind: 'key-quarantined'; readonly count: number; readonly keys: readonly WarnedKey[]; readonly message: string };

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/** "a, b, c, and 4 more". */
const listed = (names: readonly string[], count: number) => `${names.join(', ')}${count > names.length ? `, and ${count - names.length} more` : ''}`;

const THRESHOLD = `${UNSTARTED_WARNING_MS / 1000} s`;

const unreadQueue = (q: QueueRow) => q.depth > 0 && q.consumers === 0;

const queueWarning = (unread: readonly QueueRow[]): Warning => {
  const shown = unread.slice(0, LISTED_PER_WARNING);
  const one = unread[0]!;
  return {
    kind: 'queue-without-consumer',
    count: unread.length,
    queues: shown.map((q) => ({ queue: q.queue, depth: q.depth, oldestAt: q.oldestAt })),
    message:
      unread.length === 1
        ? `queue ${one.queue}: ${plural(one.depth, 'message', 'messages')} and no live worker reading it`
        : `${unread.length} queues with messages and no live worker reading them: ${listed(shown.map((q) => `${q.queue} (${q.depth})`), unread.length)}`,
  };
};

const keyWarning = (g: AttentionGroup, unread: ReadonlySet<string>, unstartedQueues: readonly string[]): Warning => {
  const keys = g.first.map((f) => ({ key: f.key, count: f.count }));
  const names = listed(keys.map((k) => k.key), g.count);
  const one = g.count === 1;
  const holders = plural(g.holders, 'holder', 'holders');
  switch (g.cause) {
    case 'holders-unstarted': {
      const unreadQueues = unstartedQueues.filter((q) => unread.has(q));
      const why = unreadQueues.length === 0 ? '' : `; they wait on ${unreadQueues.length === 1 ? 'queue' : 'queues'} ${unreadQueues.join(', ')}, which no live worker reads`;
      return {
        kind: g.cause,
        count: g.count,
        holders: g.holders,
        since: g.since!,
        keys: g.first.map((f) => ({ key: f.key, count: f.count, since: f.since! })),
        unreadQueues,
        message: (one ? `${names}: ${holders} admitted and not started for over ${THRESHOLD}` : `${g.count} keys with holders admitted and not started for over ${THRESHOLD} (${holders}): ${names}`) + why,
      };
    }
    case 'holders-worker-gone':
      return {
        kind: g.cause,
        count: g.count,
        holders: g.holders,
        keys,
        message: one
          ? `${names}: ${holders} whose worker is gone: nobody runs ${g.holders === 1 ? 'it' : 'them'} until the sweeper reclaims the lease at its expiry`
          : `${g.count} keys with holders whose worker is gone (${holders}): ${names}: nobody runs them until the sweeper reclaims their leases at their expiry`,
      };
    case 'holders-expired':
      return {
        kind: g.cause,
        count: g.count,
        holders: g.holders,
        keys,
        message: one ? `${names}: ${holders} whose lease ran out, not reclaimed by the sweeper yet` : `${g.count} keys with holders whose lease ran out, not reclaimed by the sweeper yet (${holders}): ${names}`,
      };
    case 'key-quarantined':
      return {
        kind: g.cause,
        count: g.count,
        keys,
        message: one ? `${names}: an event of its stream does not decode: its commands are refused and its jobs wait` : `${g.count} keys with an event that does not decode: ${names}: their commands are refused and their jobs wait`,
      };
  }
};

/** The queue-level warning first (it explains the unstarted holders on its queues), then one per key cause, in ATTENTION_CAUSES order. */
export const warningsOf = (page: Pick<KeyPage, 'attention' | 'unstartedQueues'>, queues: readonly QueueRow[]): Warning[] => {
  const unread = queues.filter(unreadQueue);
  const names = new Set(unread.map((q) => q.queue));
  return [...(unread.length > 0 ? [queueWarning(unread)] : []), ...page.attention.map((g) => keyWarning(g, names, page.unstartedQueues))];
};

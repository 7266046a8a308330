// The orders and sizes of a page of keys, apart from the page's query: the CLI's help names them
// without loading what the query needs (io-ts, pg; test/cli/start.e2e.test.ts keeps help light).

/**
 * The orders of a page of keys, each with the direction it starts in (what to look at first):
 * `attention`: the keys needing attention (any AttentionCause), then the keys at their limit, then
 * the rest; within each, most slots in use, then most parked; `key` (bytewise, as COLLATE "C");
 * `inUse`: the share of the limit in use; `lease`: the worst holder state (leaseStateOf's order);
 * `parked`, `scheduled`: how many; `oldestWait`: the longest-parked job (keys with none last).
 * Ties go by key.
 */
export const KEY_SORTS = { attention: 'asc', key: 'asc', inUse: 'desc', lease: 'asc', parked: 'desc', scheduled: 'desc', oldestWait: 'asc' } as const;

export const DEFAULT_KEY_PAGE = 50;
export const MAX_KEY_PAGE = 200;
/** How many keys (or queues) each warning names; the rest are counted. */
export const LISTED_PER_WARNING = 5;

import * as t from 'io-ts';
import type pg from 'pg';
import { MAX_KEY_LENGTH, Text, checkField, refine } from '../../../domain/values.js';
import { inTransaction } from '../../../projections/transaction.js';
import { paramTime, unstartedBefore } from './holder-state.js';
import { KEY_ROWS, keyColumns, toKeyRow, type HolderCounts, type KeyRow, type Row } from './list-keys.js';
import { DEFAULT_KEY_PAGE, KEY_SORTS, LISTED_PER_WARNING, MAX_KEY_PAGE } from './key-page-options.js';
import { QUARANTINES } from './quarantine.js';
import { epochMs, toMs } from './sql.js';
import { workerLive } from './workers.js';

// A page of the keys, as the dashboard reads it (GET /api/keys): sorted, filtered, counted and
// cut in the database, with the totals and the keys needing attention grouped by cause, over
// every key: what leaves the database is bounded by the page, not by the keys.

/**
 * What about a key needs an operator (the kinds of the overview's warnings): holders admitted and
 * not started for longer than the threshold, holders whose worker is gone, holders whose lease
 * ran out, an event of its stream that does not decode. A key at its limit, paused or with a line
 * is working as asked: none of these.
 */
export const ATTENTION_CAUSES = ['holders-unstarted', 'holders-worker-gone', 'holders-expired', 'key-quarantined'] as const;
export type AttentionCause = (typeof ATTENTION_CAUSES)[number];

/** A row of a page of keys: a KeyRow with what about it needs an operator, worst first ([] when nothing does). */
export interface PagedKeyRow extends KeyRow {
  readonly attention: readonly AttentionCause[];
}

export const KeySort = t.keyof(KEY_SORTS, 'KeySort');
export type KeySort = keyof typeof KEY_SORTS;
export const SortDirection = t.keyof({ asc: null, desc: null }, 'SortDirection');
export type SortDirection = t.TypeOf<typeof SortDirection>;

export interface KeyPageQuery {
  /** Page size, 1 to MAX_KEY_PAGE (default DEFAULT_KEY_PAGE). */
  readonly limit?: number;
  /** Rows of the order to pass over (default 0). */
  readonly offset?: number;
  readonly sort?: KeySort;
  /** Default: the sort's own (KEY_SORTS). */
  readonly dir?: SortDirection;
  /** Keys containing this text, whatever its case. */
  readonly match?: string;
  /** Only keys at their limit (true) or below it (false). */
  readonly atLimit?: boolean;
  /** Only keys needing attention (true) or not (false). */
  readonly attention?: boolean;
  /** Holders admitted this long ago (ms) and not started need attention. */
  readonly unstartedAfterMs: number;
}

/** The cards' figures over every key, and the workers' presence. */
export interface KeyTotals {
  readonly keys: number;
  readonly keysAtLimit: number;
  readonly slotsHeld: number;
  readonly parked: number;
  readonly scheduled: number;
  readonly oldestParkedAt: number | null;
  readonly holders: HolderCounts;
  readonly workers: { readonly live: number; readonly gone: number };
}

/** The keys of one AttentionCause: how many, their holders of that state, and the first LISTED_PER_WARNING of them. */
export interface AttentionGroup {
  readonly cause: AttentionCause;
  readonly count: number;
  /** Holders in the cause's state on those keys (0 for key-quarantined). */
  readonly holders: number;
  /** holders-unstarted: when the longest-waiting of them was admitted; null otherwise. */
  readonly since: number | null;
  /** Worst first: the longest unstarted, the most holders gone or expired; quarantined keys by key. */
  readonly first: readonly { readonly key: string; readonly count: number; readonly since: number | null }[];
}

export interface KeyPage {
  /** The query's order and page, defaults filled in. */
  readonly order: { readonly sort: KeySort; readonly dir: SortDirection; readonly limit: number; readonly offset: number };
  readonly totals: KeyTotals;
  /** Keys the filter matches (every key without one). */
  readonly matched: number;
  readonly keys: PagedKeyRow[];
  /** One group per cause with at least one key, in ATTENTION_CAUSES order. */
  readonly attention: AttentionGroup[];
  /** Queues holding jobs admitted longer ago than unstartedAfterMs and never started. */
  readonly unstartedQueues: string[];
}

const PageSize = refine(t.number, 'PageSize', (n) => Number.isSafeInteger(n) && n >= 1 && n <= MAX_KEY_PAGE, `must be an integer from 1 to ${MAX_KEY_PAGE}`);
const Offset = refine(t.number, 'Offset', (n) => Number.isSafeInteger(n) && n >= 0, 'must be an integer from 0');
const Match = refine(Text, 'Match', (s) => s.length >= 1 && s.length <= MAX_KEY_LENGTH, `must be 1 to ${MAX_KEY_LENGTH} characters`);

/** SQL: the holders of row `k` in the state of the cause `cause` names (a text expression). */
const holdersOf = (k: string, cause: string): string =>
  `CASE ${cause} WHEN 'holders-unstarted' THEN ${k}.unstarted WHEN 'holders-worker-gone' THEN ${k}.worker_gone WHEN 'holders-expired' THEN ${k}.expired ELSE 0 END`;

/** SQL: admitted before this and not started is unstarted too long ($1: now, $2: the threshold in ms). */
const UNSTARTED_BEFORE = unstartedBefore(paramTime(1), '$2::float8');

const CAUSES_ARRAY = `ARRAY[${ATTENTION_CAUSES.map((c) => `'${c}'`).join(', ')}]`;

/** SQL: the order of a page of keys, over the row `m` of `keyed` ($6: the sort, $7: 1 ascending, -1 descending; see KEY_SORTS). */
const PAGE_ORDER = (m: string): string => `
    (CASE WHEN $6::text = 'attention' THEN CASE WHEN ${m}.attention THEN 0 WHEN ${m}.at_limit THEN 1 ELSE 2 END END) * $7::int,
    (CASE WHEN $6::text = 'attention' THEN -${m}.in_use END) * $7::int,
    (CASE WHEN $6::text = 'attention' THEN -${m}.parked END) * $7::int,
    (CASE $6::text
       WHEN 'inUse' THEN ${m}.in_use::float8 / nullif(${m}.concurrency_limit, 0)
       WHEN 'parked' THEN ${m}.parked
       WHEN 'scheduled' THEN ${m}.scheduled
       WHEN 'oldestWait' THEN extract(epoch FROM ${m}.oldest_parked_at)::float8
       WHEN 'lease' THEN CASE WHEN ${m}.expired > 0 THEN 0 WHEN ${m}.worker_gone > 0 THEN 1 WHEN ${m}.unstarted > 0 THEN 2 WHEN ${m}.running > 0 THEN 3 ELSE 4 END
     END) * $7::int NULLS LAST,
    CASE WHEN $6::text = 'key' AND $7::int < 0 THEN ${m}.key COLLATE "C" END DESC,
    ${m}.key COLLATE "C"`;

// $1: now (epoch ms), $2: unstartedAfterMs, $3: match (NULL: none), $4: atLimit, $5: attention
// (NULL: either), $6: sort, $7: 1 for ascending, -1 for descending, $8: page size, $9: offset,
// $10: LISTED_PER_WARNING. KEY_ROWS once (materialized) and, from it, the totals, the page (the
// first offset + limit matching keys of the order: a top-N sort, bounded by the keys known) and the
// attention groups: the page is shipped, not the keys. The quarantines joined by hash (a few rows),
// each stream's once (QUARANTINES: a key two readers stopped at is one key) and in `keyed`, not
// looked up for each row of the page (Citus refuses a correlated subquery over a CTE's rows:
// test/citus/reads.citus.test.ts); the workers (a few rows); the unstarted holders' queues by jl_jobs_claim.
export const KEY_PAGE_SQL = /* sql */ `
WITH ${KEY_ROWS},
keyed AS MATERIALIZED (
  SELECT r.*, r.in_use >= r.concurrency_limit AS at_limit, c.causes, cardinality(c.causes) > 0 AS attention, q.quarantine
  FROM rows r
  LEFT JOIN (${QUARANTINES}) q ON q.stream = r.stream
  CROSS JOIN LATERAL (
    -- In ATTENTION_CAUSES order.
    SELECT array_remove(ARRAY[
             CASE WHEN r.oldest_unstarted_at < ${UNSTARTED_BEFORE} THEN 'holders-unstarted' END,
             CASE WHEN r.worker_gone > 0 THEN 'holders-worker-gone' END,
             CASE WHEN r.expired > 0 THEN 'holders-expired' END,
             CASE WHEN q.stream IS NOT NULL THEN 'key-quarantined' END], NULL) AS causes
  ) c
),
matching AS (
  SELECT k.* FROM keyed k
  WHERE ($3::text IS NULL OR strpos(lower(k.key), lower($3::text)) > 0)
    AND ($4::boolean IS NULL OR k.at_limit = $4::boolean)
    AND ($5::boolean IS NULL OR k.attention = $5::boolean)
),
-- A top-N sort keeps offset + limit rows, not every key; their rank is taken among them alone.
paged AS (
  SELECT p.*, row_number() OVER (ORDER BY ${PAGE_ORDER('p')}) AS ord
  FROM (SELECT m.* FROM matching m ORDER BY ${PAGE_ORDER('m')} LIMIT $8::int OFFSET $9::bigint) p
),
groups AS (
  SELECT c.cause, count(*)::int AS count, sum(${holdersOf('k', 'c.cause')})::int AS holders,
         ${epochMs("min(k.oldest_unstarted_at) FILTER (WHERE c.cause = 'holders-unstarted')")} AS since
  FROM keyed k CROSS JOIN LATERAL unnest(k.causes) AS c (cause)
  GROUP BY c.cause
)
SELECT
  (SELECT json_build_object(
            'keys', count(*),
            'keysAtLimit', count(*) FILTER (WHERE at_limit),
            'slotsHeld', coalesce(sum(in_use), 0),
            'parked', coalesce(sum(parked), 0),
            'scheduled', coalesce(sum(scheduled), 0),
            'oldestParkedAt', ${epochMs('min(oldest_parked_at)')},
            'holders', json_build_object('running', coalesce(sum(running), 0), 'unstarted', coalesce(sum(unstarted), 0), 'expired', coalesce(sum(expired), 0), 'workerGone', coalesce(sum(worker_gone), 0)))
   FROM keyed) AS totals,
  (SELECT json_build_object('live', count(*) FILTER (WHERE ${workerLive('w')}), 'gone', count(*) FILTER (WHERE NOT ${workerLive('w')})) FROM workers w) AS workers,
  (SELECT count(*)::int FROM matching) AS matched,
  (SELECT coalesce(json_agg(p ORDER BY p.ord), '[]')
   FROM (SELECT ${keyColumns('r.quarantine')}, r.causes AS attention, r.ord FROM paged r) p) AS keys,
  (SELECT coalesce(json_agg(json_build_object(
            'cause', g.cause, 'count', g.count, 'holders', g.holders, 'since', g.since,
            'first', (SELECT json_agg(f ORDER BY f.rank) FROM (
                        SELECT k.key, ${holdersOf('k', 'g.cause')} AS count,
                               CASE WHEN g.cause = 'holders-unstarted' THEN ${epochMs('k.oldest_unstarted_at')} END AS since,
                               row_number() OVER (ORDER BY CASE WHEN g.cause = 'holders-unstarted' THEN k.oldest_unstarted_at END, -${holdersOf('k', 'g.cause')}, k.key COLLATE "C") AS rank
                        FROM keyed k WHERE g.cause = ANY (k.causes)
                        ORDER BY rank LIMIT $10::int) f))
          ORDER BY array_position(${CAUSES_ARRAY}, g.cause)), '[]')
   FROM groups g) AS attention,
  (SELECT coalesce(array_agg(DISTINCT j.queue ORDER BY j.queue), '{}') FROM jl_jobs j WHERE j.status = 'holding' AND j.acquired_at < ${UNSTARTED_BEFORE}) AS "unstartedQueues"`;

type PageRow = Row & { readonly attention: AttentionCause[]; readonly ord: number };

interface PageResult {
  readonly totals: Omit<KeyTotals, 'workers'>;
  readonly workers: KeyTotals['workers'];
  readonly matched: number;
  readonly keys: PageRow[];
  readonly attention: (Omit<AttentionGroup, 'first'> & { readonly first: { key: string; count: number; since: number | null; rank: number }[] })[];
  readonly unstartedQueues: string[];
}

/** A KeyPageQuery checked, its defaults filled in: equal queries ask for the same page. */
export interface KeyPageOrder {
  readonly sort: KeySort;
  readonly dir: SortDirection;
  readonly limit: number;
  readonly offset: number;
  readonly match: string | null;
  readonly atLimit: boolean | null;
  readonly attention: boolean | null;
}

/** Checks `query` (ValidationError naming the field at fault) and fills in its defaults. */
export const keyPageOrder = (query: Omit<KeyPageQuery, 'unstartedAfterMs'>): KeyPageOrder => {
  const sort = query.sort === undefined ? 'attention' : checkField('sort', KeySort, query.sort);
  return {
    sort,
    dir: query.dir === undefined ? KEY_SORTS[sort] : checkField('dir', SortDirection, query.dir),
    limit: query.limit === undefined ? DEFAULT_KEY_PAGE : checkField('limit', PageSize, query.limit),
    offset: query.offset === undefined ? 0 : checkField('offset', Offset, query.offset),
    match: query.match === undefined ? null : checkField('match', Match, query.match),
    atLimit: query.atLimit === undefined ? null : checkField('atLimit', t.boolean, query.atLimit),
    attention: query.attention === undefined ? null : checkField('attention', t.boolean, query.attention),
  };
};

/**
 * A page of keys in the order `query.sort` asks (see KEY_SORTS) among those its filter matches,
 * with the totals and the attention groups over every key. Leases and the unstarted threshold are
 * judged on `now`, the ledger's clock (as in listKeys). Throws ValidationError naming the field of
 * a bad query.
 */
export const keyPage = async (pool: pg.Pool, query: KeyPageQuery, now: number): Promise<KeyPage> => {
  const order = keyPageOrder(query);
  const values = [now, query.unstartedAfterMs, order.match, order.atLimit, order.attention, order.sort, order.dir === 'asc' ? 1 : -1, order.limit, order.offset, LISTED_PER_WARNING];
  // JIT off: at 10,000 keys the planner's estimate sent the statement to be compiled, 3.1 s of
  // JIT for 0.3 s of execution (EXPLAIN ANALYZE); SET LOCAL needs the transaction.
  const r = await inTransaction(pool, async (client) => {
    await client.query('SET LOCAL jit = off');
    return (await client.query<PageResult>(KEY_PAGE_SQL, values)).rows[0]!;
  });
  return {
    order: { sort: order.sort, dir: order.dir, limit: order.limit, offset: order.offset },
    totals: { ...r.totals, oldestParkedAt: toMs(r.totals.oldestParkedAt), workers: r.workers },
    matched: r.matched,
    keys: r.keys.map(({ attention, ord: _, ...row }) => ({ ...toKeyRow(row), attention })),
    attention: r.attention.map((g) => ({ ...g, since: toMs(g.since), first: g.first.map((f) => ({ key: f.key, count: f.count, since: toMs(f.since) })) })),
    unstartedQueues: r.unstartedQueues,
  };
};

import pg from 'pg';
import type { Queryable } from '../../../projections/transaction.js';

// What `jobledger replay` shows beside a rebuild: how far its progress goes, and the rows each
// table holds afterwards. Both count whole tables (a sequential scan, or an index-only scan of
// the primary key): replay reads every event anyway, so a count costs a fraction of it.

/** The events of the live ledger table (appends: one row per append, each of one event or more): the total a rebuild's progress counts up to. */
export const EVENT_COUNT_SQL = /* sql */ `SELECT coalesce(sum(cardinality(types)), 0)::int AS n FROM appends`;

export const eventCount = async (db: Queryable): Promise<number> => (await db.query<{ n: number }>(EVENT_COUNT_SQL)).rows[0]!.n;

/** The rows each of `tables` holds (a projection's tables: jl_keys, jl_jobs, …), table by table. */
export const rowCounts = async (db: Queryable, tables: readonly string[]): Promise<Record<string, number>> => {
  const counts: Record<string, number> = {};
  for (const t of tables) counts[t] = (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${pg.escapeIdentifier(t)}`)).rows[0]!.n;
  return counts;
};

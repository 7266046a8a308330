import type pg from 'pg';
import { inTransaction } from '../../projections/transaction.js';
import { isPgError } from '../eventstore/postgres/write-errors.js';

/** Weeks of appends made ahead of this one: a week in which some process of the ledger opens or sweeps (else a write makes them: ENSURE_WEEKS_SQL). */
export const WEEKS_AHEAD = 1;

/** What a write that found its week missing runs once its transaction is over (write-transaction.ts), on its own connection. */
export const ENSURE_WEEKS_SQL = `SELECT jl_ensure_append_weeks(${WEEKS_AHEAD})`;

/**
 * Makes the weekly partitions of the ledger (appends, migration 17) from this week to
 * WEEKS_AHEAD weeks on; returns how many it made. If it is late, the first write of a week
 * without one fails, makes them and runs again. It waits a second at most for appends' lock
 * (ATTACH takes one that only other schema changes wait for): behind a long schema change it
 * gives up and the next caller makes them.
 */
export const ensureAppendWeeks = async (pool: pg.Pool): Promise<number> => {
  try {
    return await inTransaction(pool, async (client) => {
      await client.query(`SET LOCAL lock_timeout = '1s'`);
      return (await client.query<{ made: number }>(`${ENSURE_WEEKS_SQL} AS made`)).rows[0]!.made;
    });
  } catch (error) {
    if (isPgError(error) && error.code === '55P03') return 0;
    throw error;
  }
};

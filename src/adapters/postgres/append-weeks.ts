import type pg from 'pg';
import { inTransaction } from '../../projections/transaction.js';
import { isPgError } from '../eventstore/postgres/write-errors.js';

/** Weeks of appends made ahead of this one: two weeks in which some process of the ledger must have opened or swept. */
export const WEEKS_AHEAD = 2;

/**
 * Makes the weekly partitions of the ledger (appends, migration 17) from this week to
 * WEEKS_AHEAD weeks on; returns how many it made. A row of a week without one goes to
 * appends_default, where it stays (archive moves it row by row), so nothing fails if this is
 * late. It waits a second at most for appends' lock (ATTACH takes one that only other schema
 * changes wait for): behind a long schema change it gives up and the next caller makes them.
 */
export const ensureAppendWeeks = async (pool: pg.Pool): Promise<number> => {
  try {
    return await inTransaction(pool, async (client) => {
      await client.query(`SET LOCAL lock_timeout = '1s'`);
      return (await client.query<{ made: number }>('SELECT jl_ensure_append_weeks($1) AS made', [WEEKS_AHEAD])).rows[0]!.made;
    });
  } catch (error) {
    if (isPgError(error) && error.code === '55P03') return 0;
    throw error;
  }
};

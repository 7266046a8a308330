import type { Queryable } from '../../../projections/runner.js';
import { quarantineJson, toQuarantine, type KeyQuarantine } from './quarantine.js';
import { pauseJson, toPause, type KeyPause } from './pause.js';
import { epochMs, toMs } from './sql.js';

export type LeaseState = 'live' | 'expired' | 'unstarted' | 'none';

export interface KeyRow {
  readonly key: string;
  readonly limit: number;
  /** Slots held by the key's own jobs and by its guests (jobs of other streams under its limit). */
  readonly inUse: number;
  /** Jobs waiting in its line, its own and its guests. */
  readonly parked: number;
  readonly scheduled: number;
  readonly oldestParkedAt: number | null;
  readonly nextLeaseExpiry: number | null;
  /**
   * none: no holder; unstarted: holders, none started by a worker yet (an admission holds its slot
   * without expiry until a worker reads it); expired: some started holder's lease ran out by now
   * (the sweeper has not reclaimed it yet); live otherwise.
   */
  readonly leaseState: LeaseState;
  /** inUse >= limit: a new job of the key would park. */
  readonly atLimit: boolean;
  /** Non-null while an event of the key's stream does not decode: its commands are refused and its jobs wait (see KeyQuarantine). */
  readonly quarantine: KeyQuarantine | null;
  /** Non-null while an operator has the key paused: nothing new is admitted on it. */
  readonly paused: KeyPause | null;
}

const SQL = /* sql */ `
SELECT key,
       concurrency_limit AS "limit",
       in_use AS "inUse",
       parked,
       scheduled,
       ${epochMs('oldest_parked_at')} AS "oldestParkedAt",
       ${epochMs('next_lease_expiry')} AS "nextLeaseExpiry",
       ${quarantineJson('jl_key_stats.stream')} AS quarantine,
       ${pauseJson('jl_key_stats')} AS paused
FROM jl_key_stats
ORDER BY key`;

type Row = Omit<KeyRow, 'leaseState' | 'atLimit' | 'quarantine'> & { readonly quarantine: Parameters<typeof toQuarantine>[0] };

/**
 * Compares the nearest expiry with `now` from the ledger's clock, not the database's: the sweeper
 * decides expiry on that clock, so a lease shown expired is one the sweeper will reclaim.
 */
export const leaseStateOf = (nextLeaseExpiry: number | null, holders: number, now: number): LeaseState =>
  nextLeaseExpiry === null ? (holders > 0 ? 'unstarted' : 'none') : nextLeaseExpiry <= now ? 'expired' : 'live';

/** Every concurrency key with its limit, use and waits (jl_key_stats), ordered by key. */
export const listKeys = async (db: Queryable, now: number): Promise<KeyRow[]> => {
  const { rows } = await db.query<Row>(SQL);
  return rows.map((r) => {
    const nextLeaseExpiry = toMs(r.nextLeaseExpiry);
    return {
      ...r,
      oldestParkedAt: toMs(r.oldestParkedAt),
      nextLeaseExpiry,
      leaseState: leaseStateOf(nextLeaseExpiry, r.inUse, now),
      atLimit: r.inUse >= r.limit,
      quarantine: toQuarantine(r.quarantine),
      paused: toPause(r.paused),
    };
  });
};

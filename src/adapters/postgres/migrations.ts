import type pg from 'pg';
import { inTransaction } from '../../projections/transaction.js';
import { withClient } from '../../projections/with-client.js';
import { NotCitusError, distribute, isDistributed } from './distribution.js';
import { eventStore } from './migrations/0001-event-store.js';
import { queue } from './migrations/0002-queue.js';
import { readModels } from './migrations/0003-read-models.js';
import { jobListing } from './migrations/0004-job-listing.js';
import { setBasedWrites } from './migrations/0005-set-based-writes.js';
import { quarantine } from './migrations/0006-quarantine.js';
import { pausedKeys } from './migrations/0007-paused-keys.js';
import { limitKeys } from './migrations/0008-limit-keys.js';
import { workers } from './migrations/0009-workers.js';
import { eventArchive } from './migrations/0010-event-archive.js';
import { queueName } from './migrations/0011-queue-name.js';
import { stoppingHolders } from './migrations/0012-stopping-holders.js';
import { readChecks } from './migrations/0013-read-checks.js';
import { leaseGrace } from './migrations/0014-lease-grace.js';
import { liveRow } from './migrations/0015-live-row.js';
import { appendRows } from './migrations/0016-append-rows.js';
import { appendWeeks } from './migrations/0017-append-weeks.js';
import { jobIndex } from './migrations/0018-job-index.js';
import { parkedSince } from './migrations/0019-parked-since.js';
import { keptSnapshots } from './migrations/0020-kept-snapshots.js';
import { shardReadCheck } from './migrations/0021-shard-read-check.js';
import type { Migration } from './migrations/migration.js';

export type { Migration } from './migrations/migration.js';

export const migrations: readonly Migration[] = [eventStore, queue, readModels, jobListing, setBasedWrites, quarantine, pausedKeys, limitKeys, workers, eventArchive, queueName, stoppingHolders, readChecks, leaseGrace, liveRow, appendRows, appendWeeks, jobIndex, parkedSince, keptSnapshots, shardReadCheck];

/**
 * Applies the pending migrations, all in one transaction: a process sees the whole schema or the
 * one it had. Safe to call from many processes at once: a transaction-scoped advisory lock makes
 * them take turns, and each re-reads schema_migrations once it holds the lock. `upTo`: only the
 * migrations up to that version (a ledger of an older format, as a test loads one).
 * `distributed`: on a database with the citus extension the schema is then distributed by key
 * (./distribution.ts): 'auto' (the default) does so wherever citus is installed, true requires it
 * (NotCitusError), false leaves the tables on the coordinator.
 */
export const migrate = async (pool: pg.Pool, { upTo = Infinity, distributed = 'auto' }: { readonly upTo?: number; readonly distributed?: boolean | 'auto' } = {}): Promise<void> => {
  // Every open of a ledger migrates: a schema already current is told by two reads, without the
  // transaction and its lock (each CLI command pays for what opening costs).
  const found = await appliedVersion(pool);
  if (distributed === true && !found.citus) throw new NotCitusError();
  const distribute = found.citus && distributed !== false;
  if (upTo !== Infinity || found.version !== migrations.at(-1)!.version) await migrateInTransaction(pool, upTo);
  if (distribute && (upTo !== Infinity || found.version !== migrations.at(-1)!.version || !(await isDistributed(pool)))) await distributeOnce(pool);
};

/** The newest version applied (null when the schema has none, not migrated yet: asked first, so no statement fails and no error reaches the server's log), and whether citus is installed. */
const appliedVersion = async (pool: pg.Pool): Promise<{ version: number | null; citus: boolean }> => {
  const { rows } = await pool.query<{ present: boolean; citus: boolean }>(
    `SELECT to_regclass('schema_migrations') IS NOT NULL AS present, EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') AS citus`,
  );
  const { present, citus } = rows[0]!;
  if (!present) return { version: null, citus };
  return { version: (await pool.query<{ version: number | null }>('SELECT max(version) AS version FROM schema_migrations')).rows[0]!.version, citus };
};

/** distribute(), one process at a time (a session advisory lock on one connection): each sees what the one before did. */
const distributeOnce = (pool: pg.Pool): Promise<void> =>
  withClient(pool, async (client) => {
    await client.query(`SELECT pg_advisory_lock(hashtextextended('jobledger:distribute', 0))`);
    try {
      await distribute(client);
    } finally {
      await client.query(`SELECT pg_advisory_unlock(hashtextextended('jobledger:distribute', 0))`);
    }
  });

const migrateInTransaction = (pool: pg.Pool, upTo: number): Promise<void> =>
  inTransaction(pool, async (client) => {
    // Waits for another process's migrations; READ COMMITTED (inTransaction's), so the SELECT
    // below, a statement after the wait, sees the versions that process committed.
    await client.query(`SELECT pg_advisory_xact_lock(hashtextextended('jobledger:migrate', 0))`);
    await client.query(`
      CREATE TABLE IF NOT EXISTS schema_migrations (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations');
    const applied = new Set(rows.map((row) => row.version));
    // A schema a newer release migrated: this code would write tables it no longer knows (migration 15 replaced jl_slots, jl_parked and the queue tables).
    const known = migrations.at(-1)!.version;
    const newest = Math.max(0, ...applied);
    if (newest > known) throw new SchemaNewerError(newest, known);
    for (const migration of migrations) {
      if (applied.has(migration.version) || migration.version > upTo) continue;
      await client.query(migration.sql);
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
        migration.version,
        migration.name,
      ]);
    }
  });

/** The database's schema is newer than this release's: an older process must not write it (stop the old release before starting a new one; README, "Upgrading"). */
export class SchemaNewerError extends Error {
  override readonly name = 'SchemaNewerError';
  constructor(
    readonly databaseVersion: number,
    readonly knownVersion: number,
  ) {
    super(`the database's schema is at version ${databaseVersion}, newer than this release of jobledger knows (${knownVersion}): run the release that migrated it, or a newer one`);
  }
}

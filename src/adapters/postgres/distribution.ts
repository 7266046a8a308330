import type pg from 'pg';

// The ledger distributed by key on Citus (issue 24). Every per-key table is distributed by its
// stream, colocated with `streams`: a key's stream, its rows, its snapshots, its jobs' live rows
// and its line sit on one shard, so everything a decision on one key reads and writes is one
// shard's. What is shared by every key is small and read everywhere: reference tables, a copy on
// every node. Each table's choice, and why:

/** Distributed by `stream`, colocated with `streams` (the first: the others name it). */
export const BY_STREAM: readonly (readonly [table: string, why: string])[] = [
  ['streams', "a key stream's revision and last writer: the row its writers lock and move on"],
  ['appends', "the ledger's rows, by the stream they belong to (its weeks, partitions, are distributed with it)"],
  ['appends_archive', 'rows moved by `jobledger archive`, read with appends: on the same shard as their stream'],
  ['snapshots', "a stream's newest state, read with its lock"],
  ['snapshots_kept', "a stream's kept past states, read with its rows"],
  ['jl_keys', "a key's read model: limit, pause"],
  ['jl_jobs', "a job's live row (slot, place in line, dispatch), by its home stream: a key's holders and line are one shard's"],
  ['jl_limit_jobs', "a guest's row on a limit key, by the limit key's stream: the key's line, whatever the guests' homes"],
  ['jl_lease_grace', "a stream's lease grace after a quarantine, read by the sweeper with the stream's leases"],
  ['jl_quarantined', 'a stream that does not decode, written by the flush that met it'],
];

/** Distributed by a column of their own, in a colocation group of their own. */
export const BY_OWN_COLUMN: readonly (readonly [table: string, column: string, why: string])[] = [
  ['unique_event_ids', 'event_id', "ids that must be unique across every stream (a given job id's JobEnqueued): checked by id, inserted by the flush that records one"],
];

/** Reference tables: small, shared by every key, a copy on each node (a write goes to every node). */
export const REFERENCE: readonly (readonly [table: string, why: string])[] = [
  ['workers', "the workers' presence: joined to holders of every key"],
  ['ledger_settings', 'the projection mode, read once by each process'],
  ['projection_checkpoints', "the runners' positions (a rebuild's)"],
  ['jl_archived_weeks', 'the weeks archive moved, read by archive and the weeks upkeep'],
];

// `schema_migrations` stays on the coordinator: read and written there only.

/** Whether this database has the citus extension: the schema is then distributed by migrate. */
export const hasCitus = async (db: pg.Pool | pg.PoolClient): Promise<boolean> =>
  (await db.query<{ citus: boolean }>(`SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') AS citus`)).rows[0]!.citus;

/** Whether the ledger's tables are distributed (appends is in Citus's metadata): the write path then routes per shard. */
export const isDistributed = async (db: pg.Pool | pg.PoolClient): Promise<boolean> => {
  if (!(await hasCitus(db))) return false;
  return (await db.query<{ d: boolean }>(`SELECT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = 'appends'::regclass) AS d`)).rows[0]!.d;
};

/** The citus extension is not in this database: `migrate --distributed` cannot distribute it. */
export class NotCitusError extends Error {
  override readonly name = 'NotCitusError';
  constructor() {
    super('the database has no citus extension: run CREATE EXTENSION citus there (on a Citus coordinator) before migrating it --distributed');
  }
}

/**
 * Distributes the migrated schema (each table once: what is distributed already is left as it is).
 * Before, the two tables whose keys Citus refuses are made distributable:
 * - jl_jobs's primary key becomes (stream, job_id): a distributed table's keys must hold its
 *   distribution column. A job id is still unique, by the flush (unique_event_ids for a given id,
 *   a generated one otherwise); found by its id through jl_jobs_job, an index of each shard.
 * - jl_quarantined.stream is collated "C" as `streams` is: colocated columns share a collation.
 * Each statement runs on its own: Citus creates the shards, copying any rows already there.
 */
export const distribute = async (pool: pg.Pool | pg.PoolClient): Promise<void> => {
  if (!(await hasCitus(pool))) throw new NotCitusError();
  const distributed = async (table: string): Promise<boolean> =>
    (await pool.query<{ d: boolean }>(`SELECT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = $1::regclass) AS d`, [table])).rows[0]!.d;
  if (!(await distributed('jl_jobs'))) {
    await pool.query(`
      ALTER TABLE jl_jobs DROP CONSTRAINT jl_jobs_pkey, ADD CONSTRAINT jl_jobs_pkey PRIMARY KEY (stream, job_id);
      CREATE INDEX IF NOT EXISTS jl_jobs_job ON jl_jobs (job_id);
      COMMENT ON INDEX jl_jobs_pkey IS 'Distributed (Citus): a job''s row by its home stream and id; the upserts'' key.';
      COMMENT ON INDEX jl_jobs_job IS 'Distributed (Citus): a job''s row by its id alone (its stream unknown: every shard is asked).';`);
  }
  if (!(await distributed('jl_quarantined'))) await pool.query(`ALTER TABLE jl_quarantined ALTER COLUMN stream TYPE text COLLATE "C"`);
  for (const [table] of BY_STREAM) {
    if (await distributed(table)) continue;
    await pool.query(`SELECT create_distributed_table($1, 'stream'${table === 'streams' ? '' : `, colocate_with => 'streams'`})`, [table]);
  }
  for (const [table, column] of BY_OWN_COLUMN) {
    if (!(await distributed(table))) await pool.query(`SELECT create_distributed_table($1, $2, colocate_with => 'none')`, [table, column]);
  }
  for (const [table] of REFERENCE) {
    if (!(await distributed(table))) await pool.query(`SELECT create_reference_table($1)`, [table]);
  }
  // The reads across keys (the page, `keys`, the sweeper, metrics) join a guest's row to its
  // home's by job id, across shards: Citus plans such a join by repartitioning the rows, only
  // when the session asks. Every session of this database asks (a database's default).
  await pool.query(`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET citus.enable_repartition_joins = on', current_database()); END $$`);
};

/**
 * A distributed ledger is projected inline only. Async runners read the ledger in one order
 * (transaction_id, position), below the coordinator's snapshot: a transaction Citus commits on
 * several nodes is committed on the coordinator before it is on the workers (two-phase commit),
 * so such a reader could pass over rows a worker does not show yet, and never read them.
 */
export class DistributedAsyncError extends Error {
  override readonly name = 'DistributedAsyncError';
  constructor() {
    super('this ledger is distributed (Citus): its projections are applied in each append (inline), not by async runners; open it with inline projections');
  }
}

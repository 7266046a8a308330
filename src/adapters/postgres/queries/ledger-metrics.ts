import { FACT_BITS, MAX_ROW_EVENTS } from '../../../projections/ledger-rows.js';
import type { Queryable } from '../../../projections/transaction.js';
import { DistributedAsyncError } from '../distribution.js';
import { HOLDER_STATES, holderState, type HolderState } from './holder-state.js';
import { workerLive } from './workers.js';

// The figures a monitoring system scrapes (GET /metrics), read in one statement from the read
// models, the workers' presence, the projections' checkpoints and the catalog. Ages are on the
// database's clock. Bounded: nothing here grows with the number of keys (the keys named are the
// TOP_KEYS first of each ranking), so a scrape stays one series set whatever the ledger holds.

/** How many keys each ranking names (the keys with the most parked jobs, and with the longest wait). */
export const TOP_KEYS = 10;

export interface RankedKey {
  readonly key: string;
  readonly parked: number;
  /** How long its longest-parked job has waited. */
  readonly oldestParkedSeconds: number;
}

export interface ProjectionLag {
  readonly projection: string;
  /** Events of the ledger past the projection's checkpoint: recorded, not applied yet. */
  readonly events: number;
  /** Age of the oldest of them (0 when none). */
  readonly seconds: number;
}

export interface LedgerMetrics {
  readonly keys: number;
  /** Keys whose slots are all held, by their own jobs and their guests. */
  readonly keysAtLimit: number;
  /** Streams (keys, and jobs without a key) with an event some reader cannot decode (jl_quarantined). */
  readonly quarantinedStreams: number;
  /** Keys an operator paused (jl_keys.paused_at): nothing new is admitted on them. */
  readonly pausedKeys: number;
  /** Slots held at the jobs' homes, one per holding job (a job also holding slots of limit keys is counted once: see guestsHolding). */
  readonly slotsHeld: number;
  /** Held slots whose lease has run out (the sweeper has not reclaimed them yet). */
  readonly slotsExpired: number;
  /** Parked jobs, each once at its home (see guestsParked). */
  readonly parked: number;
  /** Slots of limit keys held by jobs of other streams (jl_limit_jobs): one per job and limit key, a total over all keys. */
  readonly guestsHolding: number;
  /** Places in limit keys' lines taken by jobs of other streams: one per job and limit key, a total over all keys. */
  readonly guestsParked: number;
  /** How long the longest-parked job has waited (0 when nothing is parked). */
  readonly oldestParkedSeconds: number;
  readonly jobsByStatus: Readonly<Record<string, number>>;
  /** Holders (at their homes, as slotsHeld) by state; every state present, 0 included. */
  readonly holdersByState: Readonly<Record<HolderState, number>>;
  readonly workersLive: number;
  /** Workers seen within the last day and gone now (stopped, or silent for 3 heartbeats). */
  readonly workersGone: number;
  /** The TOP_KEYS keys with the most parked jobs (own and guests), most first. */
  readonly topParked: readonly RankedKey[];
  /** The TOP_KEYS keys whose longest-parked job has waited longest, longest first. */
  readonly topWaiting: readonly RankedKey[];
  /**
   * Events of the live ledger, estimated: its rows (appends) from the catalog (pg_class.reltuples
   * scaled to the table's current pages, as the planner does), times the events a row of the
   * newest 1,000 holds: a count of the ledger would read all of it. Exact (counted) while the
   * table was never analyzed, which only a young, small table is.
   */
  readonly ledgerEvents: number;
  /** Bytes of the live ledger (appends) with its indexes and TOAST (pg_total_relation_size). */
  readonly ledgerBytes: number;
  /** The same two figures of the archive (appends_archive): events of jobs `jobledger archive` moved out of the live table. */
  readonly archivedEvents: number;
  readonly archivedBytes: number;
  readonly projectionLag: readonly ProjectionLag[];
}

/**
 * A ledger table's events as estimated (see LedgerMetrics.ledgerEvents), summed over its week
 * partitions (jl_estimated_events, migration 17): a partition's rows as the planner estimates
 * them, counted while it was never analyzed (only a young, small one is), times the events of the
 * table's newest rows (its global order index, backwards: 1,000 index entries at most).
 */
const estimatedRows = (table: 'appends' | 'appends_archive'): string => `jl_estimated_events('${table}')`;
/** A partitioned ledger table's size with its indexes and TOAST: its partitions'. */
const totalBytes = (table: 'appends' | 'appends_archive'): string => `(SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('${table}'))::float8`;

export interface LedgerSize {
  /** Events of the live ledger (appends) and of its archive (appends_archive), estimated as in LedgerMetrics. */
  readonly events: number;
  readonly archivedEvents: number;
  /** Bytes of each, with indexes and TOAST. */
  readonly bytes: number;
  readonly archivedBytes: number;
}

/** Where the ledger's tables are: on this server, or distributed by key (Citus: src/adapters/postgres/distribution.ts). */
export interface LedgerLayout {
  /** The ledger is distributed (default false): its rows are in the shards of the nodes, its tables on the coordinator are empty. */
  readonly distributed?: boolean;
}

// Reads the catalog (pg_class by its oid index), the two tables' sizes and their newest 1,000
// rows (appends_global_order, appends_archive_global_order); the tables themselves only while never analyzed.
export const LEDGER_SIZE_SQL = /* sql */ `SELECT ${estimatedRows('appends')} AS events, ${estimatedRows('appends_archive')} AS "archivedEvents",
  ${totalBytes('appends')} AS bytes, ${totalBytes('appends_archive')} AS "archivedBytes"`;

// LEDGER_SIZE_SQL on a distributed ledger: the coordinator's tables are empty, the rows are in
// the shards, each node's own (pg_dist_placement of its group). Each node estimates its shards as
// LEDGER_SIZE_SQL does this server's tables (jl_estimated_events of each shard, a partitioned
// table as its table is, and its partitions' sizes), one command per node at once
// (run_command_on_all_nodes: a connection to each); a failing node fails the read (its error is
// not a number). Guarded by test/citus/reads.citus.test.ts (the ledger's size).
export const DISTRIBUTED_LEDGER_SIZE_SQL = /* sql */ `
SELECT coalesce(sum((n.result::json->>'events')::float8), 0) AS events, coalesce(sum((n.result::json->>'archivedEvents')::float8), 0) AS "archivedEvents",
       coalesce(sum((n.result::json->>'bytes')::float8), 0) AS bytes, coalesce(sum((n.result::json->>'archivedBytes')::float8), 0) AS "archivedBytes"
FROM run_command_on_all_nodes($$
  SELECT json_build_object(
           'events', coalesce(sum(jl_estimated_events(l.shard)) FILTER (WHERE l.parent = 'appends'), 0),
           'archivedEvents', coalesce(sum(jl_estimated_events(l.shard)) FILTER (WHERE l.parent = 'appends_archive'), 0),
           'bytes', coalesce(sum(l.bytes) FILTER (WHERE l.parent = 'appends'), 0),
           'archivedBytes', coalesce(sum(l.bytes) FILTER (WHERE l.parent = 'appends_archive'), 0))
  FROM (SELECT s.logicalrelid::text AS parent, shard_name(s.logicalrelid, s.shardid)::regclass AS shard,
               (SELECT sum(pg_total_relation_size(t.relid)) FROM pg_partition_tree(shard_name(s.logicalrelid, s.shardid)::regclass) t) AS bytes
        FROM pg_dist_shard s JOIN pg_dist_placement p USING (shardid)
        WHERE s.logicalrelid IN ('appends'::regclass, 'appends_archive'::regclass)
          AND p.groupid = (SELECT groupid FROM pg_dist_local_group)) l$$) n`;

/** The ledger's size alone (the overview's card): the catalog's figures (a distributed ledger's: its nodes'), no scan. */
export const readLedgerSize = async (db: Queryable, { distributed = false }: LedgerLayout = {}): Promise<LedgerSize> =>
  (await db.query<LedgerSize>(distributed ? DISTRIBUTED_LEDGER_SIZE_SQL : LEDGER_SIZE_SQL)).rows[0]!;

// The parked jobs of each key, own and guests (the count jl_key_stats.parked gives), from the
// parked rows alone: ranking through jl_key_stats would count every key's slots and jobs too.
// Counts whole read models (jl_keys, jl_key_stats, jl_slots, jl_parked, jl_limit_jobs, jl_jobs,
// jl_quarantined, workers). `sizes`: the four size columns (and a comma), `lag` the projections'
// lag as JSON, `from` what the sizes read besides.
const ledgerMetricsSql = ({ sizes, lag, from }: { sizes: string; lag: string; from: string }): string => /* sql */ `
WITH waiting AS MATERIALIZED (
  SELECT k.key, count(*)::int AS parked, extract(epoch FROM statement_timestamp() - min(w.since))::float8 AS "oldestParkedSeconds"
  FROM (SELECT stream, parked_at AS since FROM jl_parked
        UNION ALL
        SELECT stream, since FROM jl_limit_jobs WHERE status = 'parked') w
  JOIN jl_keys k USING (stream)
  GROUP BY k.key
)
SELECT
  (SELECT count(*) FROM jl_keys)::int AS keys,
  (SELECT count(*) FROM jl_key_stats WHERE in_use >= concurrency_limit)::int AS keys_at_limit,
  (SELECT count(DISTINCT stream) FROM jl_quarantined)::int AS quarantined_streams,
  (SELECT count(*) FROM jl_keys WHERE paused_at IS NOT NULL)::int AS paused_keys,
  (SELECT count(*) FROM jl_slots)::int AS slots_held,
  (SELECT count(*) FROM jl_slots WHERE expires_at <= statement_timestamp())::int AS slots_expired,
  (SELECT count(*) FROM jl_parked)::int AS parked,
  coalesce((SELECT extract(epoch FROM statement_timestamp() - min(parked_at)) FROM jl_parked), 0)::float8 AS oldest_parked_seconds,
  guests.holding AS guests_holding,
  guests.parked AS guests_parked,
  (SELECT coalesce(jsonb_object_agg(status, n), '{}') FROM (SELECT status, count(*)::int AS n FROM jl_jobs GROUP BY status) s) AS jobs_by_status,
  (SELECT coalesce(jsonb_object_agg(state, n), '{}') FROM (
     SELECT ${holderState('s', 'w', 'statement_timestamp()')} AS state, count(*)::int AS n
     FROM jl_slots s LEFT JOIN workers w ON w.id = s.worker_id GROUP BY 1) h) AS holders_by_state,
  (SELECT count(*) FILTER (WHERE ${workerLive('w')})::int FROM workers w) AS workers_live,
  (SELECT count(*) FILTER (WHERE NOT ${workerLive('w')})::int FROM workers w) AS workers_gone,
  (SELECT coalesce(jsonb_agg(r ORDER BY r.parked DESC, r.key), '[]') FROM (SELECT * FROM waiting ORDER BY parked DESC, key LIMIT ${TOP_KEYS}) r) AS top_parked,
  (SELECT coalesce(jsonb_agg(r ORDER BY r."oldestParkedSeconds" DESC, r.key), '[]') FROM (SELECT * FROM waiting ORDER BY "oldestParkedSeconds" DESC, key LIMIT ${TOP_KEYS}) r) AS top_waiting,
  ${sizes}
  ${lag} AS projection_lag
FROM (SELECT count(*) FILTER (WHERE status = 'holding')::int AS holding, count(*) FILTER (WHERE status = 'parked')::int AS parked FROM jl_limit_jobs) guests${from}`;

// The events of each async projection past its checkpoint ($1: their names), as JSON: reads
// projection_checkpoints (projection_checkpoints_pkey) and the rows past each checkpoint (appends_global_order).
const PROJECTION_LAG = /* sql */ `(SELECT coalesce(jsonb_agg(jsonb_build_object('projection', p.name, 'events', lag.events, 'seconds', lag.seconds) ORDER BY p.name), '[]')
   FROM unnest($1::text[]) AS p (name)
   LEFT JOIN projection_checkpoints c ON c.projection = p.name
   CROSS JOIN LATERAL (SELECT coalesce(c.commit, 0)::text::xid8 AS commit, coalesce(c.prepare, 0)::bigint AS prepare) at
   CROSS JOIN LATERAL (
     SELECT coalesce(sum(e.n), 0)::int AS events,
            coalesce(extract(epoch FROM statement_timestamp() - min(e.created) FILTER (WHERE e.n > 0)), 0)::float8 AS seconds
     FROM (
       -- The events of each row past the checkpoint: all of them, but in the row that holds it.
       SELECT cardinality(a.types) - CASE WHEN a.position = at.prepare >> ${FACT_BITS} THEN (at.prepare & ${MAX_ROW_EVENTS - 1}) + 1 ELSE 0 END AS n, a.created
       FROM appends a
       WHERE (a.transaction_id, a.position) >= (at.commit, at.prepare >> ${FACT_BITS})
     ) e
   ) lag)`;

/** The sizes of LEDGER_SIZE_SQL, as the metrics' columns. */
const CATALOG_SIZES = /* sql */ `${estimatedRows('appends')} AS ledger_events,
  ${totalBytes('appends')} AS ledger_bytes,
  ${estimatedRows('appends_archive')} AS archived_events,
  ${totalBytes('appends_archive')} AS archived_bytes,`;

export const LEDGER_METRICS_SQL = ledgerMetricsSql({ sizes: CATALOG_SIZES, lag: PROJECTION_LAG, from: '' });

// With no async projection (inline ones have no lag) the lag is not read at all: Citus cannot
// push its LATERAL read of appends down, and a distributed ledger's projections are inline
// (DistributedAsyncError), so this text also runs there (its sizes then the coordinator's empty
// tables': DISTRIBUTED_LEDGER_METRICS_SQL reads the shards'). Guarded by test/citus/reads.citus.test.ts.
export const INLINE_LEDGER_METRICS_SQL = ledgerMetricsSql({ sizes: CATALOG_SIZES, lag: `'[]'::jsonb`, from: '' });

// The metrics of a distributed ledger: INLINE_LEDGER_METRICS_SQL with the shards' sizes (DISTRIBUTED_LEDGER_SIZE_SQL).
export const DISTRIBUTED_LEDGER_METRICS_SQL = ledgerMetricsSql({
  sizes: /* sql */ `size.events AS ledger_events,
  size.bytes AS ledger_bytes,
  size."archivedEvents" AS archived_events,
  size."archivedBytes" AS archived_bytes,`,
  lag: `'[]'::jsonb`,
  from: ` CROSS JOIN (${DISTRIBUTED_LEDGER_SIZE_SQL}) size`,
});

/** The statement of the metrics (and its values) for these async projections and this layout. */
const metricsQuery = (asyncProjections: readonly string[], distributed: boolean): [string, unknown[]] => {
  if (asyncProjections.length === 0) return [distributed ? DISTRIBUTED_LEDGER_METRICS_SQL : INLINE_LEDGER_METRICS_SQL, []];
  if (distributed) throw new DistributedAsyncError();
  return [LEDGER_METRICS_SQL, [asyncProjections]];
};

interface Row {
  keys: number;
  keys_at_limit: number;
  quarantined_streams: number;
  paused_keys: number;
  slots_held: number;
  slots_expired: number;
  parked: number;
  guests_holding: number;
  guests_parked: number;
  oldest_parked_seconds: number;
  jobs_by_status: Record<string, number>;
  holders_by_state: Partial<Record<HolderState, number>>;
  workers_live: number;
  workers_gone: number;
  top_parked: RankedKey[];
  top_waiting: RankedKey[];
  ledger_events: number;
  ledger_bytes: number;
  archived_events: number;
  archived_bytes: number;
  projection_lag: ProjectionLag[];
}

/**
 * A snapshot of the ledger's figures. `asyncProjections` names the projections applied by async
 * runners: their lag is the events past their checkpoint. Inline projections apply in the append
 * transaction and have none, so they are not asked about. A distributed ledger (`distributed`)
 * has inline projections only (DistributedAsyncError otherwise) and its sizes are its shards'.
 */
export const readLedgerMetrics = async (db: Queryable, asyncProjections: readonly string[], { distributed = false }: LedgerLayout = {}): Promise<LedgerMetrics> => {
  const { rows } = await db.query<Row>(...metricsQuery(asyncProjections, distributed));
  const r = rows[0]!;
  return {
    keys: r.keys,
    keysAtLimit: r.keys_at_limit,
    quarantinedStreams: r.quarantined_streams,
    pausedKeys: r.paused_keys,
    slotsHeld: r.slots_held,
    slotsExpired: r.slots_expired,
    parked: r.parked,
    guestsHolding: r.guests_holding,
    guestsParked: r.guests_parked,
    oldestParkedSeconds: r.oldest_parked_seconds,
    jobsByStatus: r.jobs_by_status,
    holdersByState: Object.fromEntries(HOLDER_STATES.map((state) => [state, r.holders_by_state[state] ?? 0])) as Record<HolderState, number>,
    workersLive: r.workers_live,
    workersGone: r.workers_gone,
    topParked: r.top_parked,
    topWaiting: r.top_waiting,
    ledgerEvents: r.ledger_events,
    ledgerBytes: r.ledger_bytes,
    archivedEvents: r.archived_events,
    archivedBytes: r.archived_bytes,
    projectionLag: r.projection_lag,
  };
};

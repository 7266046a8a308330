import type { Queryable } from '../../../projections/runner.js';

// The figures a monitoring system scrapes (GET /metrics), read in one statement from the read
// models, the queue tables and the projections' checkpoints. Ages are on the database's clock.

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
  /** Every dispatch queue ever sent to. */
  readonly queues: readonly string[];
  readonly projectionLag: readonly ProjectionLag[];
}

const SQL = /* sql */ `
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
  (SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM queues) AS queues,
  (SELECT coalesce(jsonb_agg(jsonb_build_object('projection', p.name, 'events', lag.events, 'seconds', lag.seconds) ORDER BY p.name), '[]')
   FROM unnest($1::text[]) AS p (name)
   LEFT JOIN projection_checkpoints c ON c.projection = p.name
   CROSS JOIN LATERAL (
     SELECT count(*)::int AS events,
            coalesce(extract(epoch FROM statement_timestamp() - min(e.created)), 0)::float8 AS seconds
     FROM events e
     WHERE (e.transaction_id, e.global_position) > (coalesce(c.commit, 0)::text::xid8, coalesce(c.prepare, 0)::bigint)
   ) lag) AS projection_lag
FROM (SELECT count(*) FILTER (WHERE status = 'holding')::int AS holding, count(*) FILTER (WHERE status = 'parked')::int AS parked FROM jl_limit_jobs) guests`;

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
  queues: string[];
  projection_lag: ProjectionLag[];
}

/**
 * A snapshot of the ledger's figures. `asyncProjections` names the projections applied by async
 * runners: their lag is the events past their checkpoint. Inline projections apply in the append
 * transaction and have none, so they are not asked about.
 */
export const readLedgerMetrics = async (db: Queryable, asyncProjections: readonly string[]): Promise<LedgerMetrics> => {
  const { rows } = await db.query<Row>(SQL, [asyncProjections]);
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
    queues: r.queues,
    projectionLag: r.projection_lag,
  };
};

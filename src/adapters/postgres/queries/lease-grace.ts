// The sweeper's read of jl_lease_grace (migration 0014): since when each stream could be read again
// after its quarantine. Every row, not only the streams about to have leases expired: a lease gets
// the grace of its job's limit keys too (ExpireLeases streamGrace), which the sweeper does not know.
// A handful of rows: one per stream quarantined within the last day. Written by
// src/projections/quarantine.ts; pruned by LEASE_GRACE_PRUNE_SQL.
export const LEASE_GRACE_SQL = /* sql */ `SELECT stream, since_ms::float8 AS since_ms FROM jl_lease_grace`;

// A grace older than the longest lease ($1: now minus a day, epoch ms) can no longer hold any lease back.
export const LEASE_GRACE_PRUNE_SQL = /* sql */ `DELETE FROM jl_lease_grace WHERE since_ms < $1`;

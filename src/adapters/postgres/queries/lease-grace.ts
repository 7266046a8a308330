// The sweeper's reads of jl_lease_grace (migration 0014): since when each stream about to have
// its leases expired could be renewed again (its quarantine ended then), by jl_lease_grace_pkey.
// $1: the streams. Written by src/projections/quarantine.ts; pruned by LEASE_GRACE_PRUNE_SQL.
export const LEASE_GRACE_SQL = /* sql */ `SELECT stream, since_ms::float8 AS since_ms FROM jl_lease_grace WHERE stream = ANY($1::text[])`;

// A grace older than the longest lease ($1: now minus a day, epoch ms) can no longer hold any lease back.
export const LEASE_GRACE_PRUNE_SQL = /* sql */ `DELETE FROM jl_lease_grace WHERE since_ms < $1`;

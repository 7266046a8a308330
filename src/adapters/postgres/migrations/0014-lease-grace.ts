import type { Migration } from './migration.js';

// Issue 21, items 3 and 7: a stream that could not be read (quarantined) could not have its
// leases renewed or its results recorded either. When its quarantine ends, the sweeper gives its
// leases one whole lease from then before it expires any (ExpireLeases graceFrom), so the workers'
// renewals and kept results land first. The moment is kept here, not in the sweeper's memory: a
// sweeper that starts leading just after (the leader's connection dropped) must give the same
// grace (the model checker found a completed job run again when it did not).
export const leaseGrace: Migration = {
  version: 14,
  name: 'lease-grace',
  sql: /* sql */ `
CREATE TABLE jl_lease_grace (
  stream   text COLLATE "C" PRIMARY KEY,
  since_ms bigint NOT NULL
);
COMMENT ON TABLE jl_lease_grace IS
  'Streams whose leases could not be renewed until since_ms (their key writer quarantine ended then): no lease of the stream expires before since_ms plus its length. Written by the sweeper when it ends a quarantine (src/projections/quarantine.ts), read and pruned (after a day, the longest lease) by the sweeper.';
COMMENT ON COLUMN jl_lease_grace.stream IS
  'The stream (key:<key>, or job:<jobId>) whose quarantine ended.';
COMMENT ON COLUMN jl_lease_grace.since_ms IS
  'When it ended, in epoch ms on the ledger''s clock (the sweeper''s, the one leases are judged by).';
COMMENT ON INDEX jl_lease_grace_pkey IS
  'Finds the grace of each stream the sweeper is about to expire leases on.';
`,
};

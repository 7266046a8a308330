import type { Migration } from './migration.js';

// The key writer's set-based path (issue 9): every flush writes each read model with one
// statement per table, and the dispatcher's messages follow their leases.
// - dispatch_jobs goes: a message is built from jl_jobs in the transaction that admits the job
//   (inline), or by the dispatcher runner, which never passes the read models' checkpoint (async).
// - projection_streams goes: inline projections commit with the events they apply (nothing can
//   apply them twice), async runners keep a checkpoint; a rebuild locks the read-model tables.
// - An admission has no expiry until a worker starts it (jl_slots.expires_at NULL).
// - No jl_jobs index names `status` any more, so a status change (the common update) can be a
//   HOT update that touches no index; fillfactor leaves each page room for one.
// - ledger_settings records how the database is projected (inline or async): both at once would
//   apply every event twice.
export const setBasedWrites: Migration = {
  version: 5,
  name: 'set_based_writes',
  sql: /* sql */ `
DROP TABLE dispatch_jobs;
DROP TABLE projection_streams;

ALTER TABLE jl_slots ALTER COLUMN expires_at DROP NOT NULL;
UPDATE jl_slots SET expires_at = NULL WHERE worker_id IS NULL;
COMMENT ON COLUMN jl_slots.expires_at IS
  'When the lease runs out unless renewed: set when a worker starts the job (JobStarted) and by LeaseRenewed; NULL for an admission no worker has started, which holds its slot without expiry.';
DROP INDEX jl_slots_expiry;
CREATE INDEX jl_slots_expiry ON jl_slots (expires_at) INCLUDE (stream) WHERE expires_at IS NOT NULL;
COMMENT ON INDEX jl_slots_expiry IS
  'The sweeper: which streams have a started lease expired by now (expires_at <= $now), without touching the table.';
DROP INDEX jl_slots_stream;
CREATE INDEX jl_slots_stream ON jl_slots (stream);
COMMENT ON INDEX jl_slots_stream IS
  'The holders of one key: slots in use and the nearest lease expiry for jl_key_stats and the key view.';

DROP INDEX jl_jobs_due;
CREATE INDEX jl_jobs_due ON jl_jobs (run_at) INCLUDE (stream) WHERE run_at IS NOT NULL;
COMMENT ON INDEX jl_jobs_due IS
  'The sweeper: scheduled jobs due by now (run_at <= $now) and their streams, to AdmitDue. run_at is set exactly while a job is scheduled, so the index holds only scheduled jobs.';
DROP INDEX jl_jobs_stream;
CREATE INDEX jl_jobs_scheduled ON jl_jobs (stream, run_at) WHERE run_at IS NOT NULL;
COMMENT ON INDEX jl_jobs_scheduled IS
  'The scheduled jobs of one key, soonest first: counts for jl_key_stats and the key view. No index names status, so a status change stays a HOT update.';
ALTER TABLE jl_jobs SET (fillfactor = 80);
COMMENT ON COLUMN jl_jobs.run_at IS
  'When a scheduled job (or retry) is due; null in any other status (so run_at IS NOT NULL means scheduled, which the indexes use).';

CREATE OR REPLACE VIEW jl_key_stats AS
SELECT k.key,
       k.stream,
       k.concurrency_limit,
       k.lease_ms,
       (SELECT count(*) FROM jl_slots s WHERE s.stream = k.stream)::integer AS in_use,
       (SELECT count(*) FROM jl_parked p WHERE p.stream = k.stream)::integer AS parked,
       (SELECT count(*) FROM jl_jobs j WHERE j.stream = k.stream AND j.run_at IS NOT NULL)::integer AS scheduled,
       (SELECT min(p.parked_at) FROM jl_parked p WHERE p.stream = k.stream) AS oldest_parked_at,
       (SELECT min(s.expires_at) FROM jl_slots s WHERE s.stream = k.stream) AS next_lease_expiry,
       k.updated_at
FROM jl_keys k;
COMMENT ON COLUMN jl_key_stats.next_lease_expiry IS
  'The nearest lease expiry among the started holders; null when no started slot is held.';

ALTER TABLE projection_checkpoints ADD COLUMN applied_snapshot pg_snapshot;
COMMENT ON COLUMN projection_checkpoints.applied_snapshot IS
  'Set by a rebuild: it applied every event this snapshot sees, also past the checkpoint (which stays below the snapshot''s xmin, since a transaction then open may commit below it). A runner passes over those events; cleared once the checkpoint passes the snapshot''s xmax.';

CREATE TABLE ledger_settings (
  name  text PRIMARY KEY,
  value text NOT NULL
);
COMMENT ON TABLE ledger_settings IS
  'Settings of the whole database that every process must agree on; read when a ledger opens.';
COMMENT ON COLUMN ledger_settings.name IS
  'projections: how the read models and the dispatcher are applied.';
COMMENT ON COLUMN ledger_settings.value IS
  'For projections: inline (in each flush) or async (by runners from a checkpoint); set by the first ledger that opens the database.';
COMMENT ON INDEX ledger_settings_pkey IS
  'One value per setting.';
`,
};

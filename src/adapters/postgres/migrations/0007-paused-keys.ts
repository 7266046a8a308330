import type { Migration } from './migration.js';

// Pausing a key (issue 11): KeyPaused / KeyResumed are events of the key's stream; the read model
// of the key says whether it is paused, by whom and why, for the dashboard, `jobledger keys` and
// /metrics. NULL in all three while the key runs (and in every row written before pauses existed).
export const pausedKeys: Migration = {
  version: 7,
  name: 'paused-keys',
  sql: /* sql */ `
ALTER TABLE jl_keys
  ADD COLUMN paused_at     timestamptz,
  ADD COLUMN paused_by     text,
  ADD COLUMN paused_reason text;
COMMENT ON COLUMN jl_keys.paused_at IS
  'When the key was paused (its last KeyPaused, unless a KeyResumed followed); NULL while it runs. While paused nothing new is admitted on it.';
COMMENT ON COLUMN jl_keys.paused_by IS
  'Who paused it (KeyPaused.by); NULL while it runs.';
COMMENT ON COLUMN jl_keys.paused_reason IS
  'Why, as they said (KeyPaused.reason); NULL while it runs or when no reason was given.';

-- The keys list reads jl_key_stats: its row carries the pause too (new columns go at the end).
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
       k.updated_at,
       k.paused_at,
       k.paused_by,
       k.paused_reason
FROM jl_keys k;
COMMENT ON COLUMN jl_key_stats.paused_at IS
  'jl_keys.paused_at: when the key was paused; NULL while it runs.';
COMMENT ON COLUMN jl_key_stats.paused_by IS
  'jl_keys.paused_by.';
COMMENT ON COLUMN jl_key_stats.paused_reason IS
  'jl_keys.paused_reason.';
`,
};

import type { Migration } from '../migrations.js';

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
`,
};

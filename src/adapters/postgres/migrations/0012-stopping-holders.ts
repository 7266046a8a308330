import type { Migration } from './migration.js';

// Issue 21, item 1: a cancel or a release of a running job no longer frees its slot at once (the
// handler may still run); it revokes the lease, and the slot passes on when the worker says the
// handler stopped, or when the lease lapses. Meanwhile the holder stays in jl_slots, and these
// columns say that it is stopping, who asked and whether its job is then cancelled: what the
// page and `jobledger state` show beside such a holder. Written by the read-model projection
// (LeaseRevoked), gone with the row (SlotReleased).
export const stoppingHolders: Migration = {
  version: 12,
  name: 'stopping-holders',
  sql: /* sql */ `
ALTER TABLE jl_slots ADD COLUMN revoked_by text, ADD COLUMN revoked_at timestamptz, ADD COLUMN revoke_cancels boolean;
COMMENT ON COLUMN jl_slots.revoked_by IS
  'Who revoked this running lease (a release, or a cancel of its job): its handler is told to stop, and the slot passes on when it has or the lease lapses. Null while nobody has.';
COMMENT ON COLUMN jl_slots.revoked_at IS
  'When the lease was revoked; null while it is not.';
COMMENT ON COLUMN jl_slots.revoke_cancels IS
  'true: the revocation cancels the job (it is not retried); false: a release (it is retried, as a reclaimed lease''s job is); null while not revoked.';
`,
};

import type { Migration } from './migration.js';

// One queue-name rule: the domain's QueueName (src/domain/values.ts: 1-63 letters, digits, "_",
// "." or "-", not starting with "." or "-", which a shell would take for a flag) is now also the
// queues table's CHECK; 0002's let a name start with "." or "-". NOT VALID: a queue made under
// the old rule by a direct PgQueue user stays usable, and every new one follows the one rule.
//
// Not here, on purpose: a partial index of dead jobs (WHERE status = 'dead') for DEAD_JOBS_SQL.
// An index that names status, even in its predicate, makes every status change of a job a non-HOT
// update (migration 0005); a key's dead jobs are read by an operator's retry or discard, rarely.
export const queueName: Migration = {
  version: 11,
  name: 'queue-name',
  sql: /* sql */ `
ALTER TABLE queues DROP CONSTRAINT queues_name_check;
ALTER TABLE queues ADD CONSTRAINT queues_name_check CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$') NOT VALID;
`,
};

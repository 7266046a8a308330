import type { Migration } from './migration.js';

// The dispatch queue (PGMQ semantics in our own SQL, see src/adapters/queue/pg-queue.ts): one set
// of tables for every queue, keyed by queue name, so a new queue is a row, never DDL. Queue names
// are collated "C" like stream names: bytewise, whatever the database's default collation.
//
// `queue_send_counts` is not in PGMQ: it keeps `queues.total_sent` exact without making senders
// wait on the queue row (a sender usually runs inside its caller's transaction, and would hold
// that row's lock until the caller commits).
//
// No foreign key from the message tables to `queues`, on purpose: its check locks the queue row
// (FOR KEY SHARE) once per inserted message, and under concurrent sends that lock deadlocked
// with the update of total_sent (seen in testing: a KEY SHARE lock following the row's update
// chain waited on the updater while the updater waited on its tuple lock). The row a message
// needs is created by the statement that inserts the message (see SEND_SQL in
// src/adapters/queue/pg-queue.ts), and nothing deletes queue rows.
export const queue: Migration = {
  version: 2,
  name: 'queue',
  sql: /* sql */ `
CREATE TABLE queues (
  name       text COLLATE "C" PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.-]{1,63}$'),
  created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
  total_sent bigint NOT NULL DEFAULT 0 CHECK (total_sent >= 0)
);

COMMENT ON TABLE queues IS
  'One row per queue, created by the first send to it (or by create()). Messages of every queue live in queue_messages.';
COMMENT ON COLUMN queues.name IS
  'Queue name: 1-63 letters, digits, "_", "." or "-" (also the NOTIFY payload on channel jobledger_queue).';
COMMENT ON COLUMN queues.created_at IS
  'When the queue row was created.';
COMMENT ON COLUMN queues.total_sent IS
  'Messages sent to the queue and committed, except those still counted in queue_send_counts: the total is this plus the queue''s rows there. Never decreases (purge does not reset it).';
COMMENT ON INDEX queues_pkey IS
  'Finds a queue by name; one row per name.';

CREATE TABLE queue_send_counts (
  queue text COLLATE "C" NOT NULL,
  sent  bigint NOT NULL CHECK (sent > 0)
);

COMMENT ON TABLE queue_send_counts IS
  'Sends not yet added to queues.total_sent: written by a send that found the queue row held by another open transaction (or ran above READ COMMITTED), so it never waits for it. Whichever send next holds the queue row folds these rows into total_sent; the table stays a handful of rows per queue.';
COMMENT ON COLUMN queue_send_counts.queue IS
  'Queue the messages were sent to.';
COMMENT ON COLUMN queue_send_counts.sent IS
  'Number of messages the sending statement inserted.';

CREATE TABLE queue_messages (
  msg_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  queue       text COLLATE "C" NOT NULL,
  read_ct     integer NOT NULL DEFAULT 0 CHECK (read_ct >= 0),
  enqueued_at timestamptz NOT NULL,
  vt          timestamptz NOT NULL,
  message     jsonb NOT NULL
);

COMMENT ON TABLE queue_messages IS
  'Messages waiting or in flight, of every queue. A message is visible to read() once vt has passed; read() moves vt on (the visibility timeout), archive() and delete() remove it.';
COMMENT ON COLUMN queue_messages.msg_id IS
  'Message id, unique across all queues (taken at insert, so a message of an uncommitted transaction can appear later with a lower id).';
COMMENT ON COLUMN queue_messages.queue IS
  'Queue the message belongs to.';
COMMENT ON COLUMN queue_messages.read_ct IS
  'How many times the message was handed out by read() or pop(); more than 1 means it was redelivered after a visibility timeout.';
COMMENT ON COLUMN queue_messages.enqueued_at IS
  'Start of the sending statement.';
COMMENT ON COLUMN queue_messages.vt IS
  'Visible at: read() hands the message out only once this has passed. Set to enqueued_at plus the delay by send, to the read time plus the visibility timeout by read() and setVt().';
COMMENT ON COLUMN queue_messages.message IS
  'The message payload, any JSON value.';
COMMENT ON INDEX queue_messages_pkey IS
  'Finds one message by id for setVt, archive, delete.';

CREATE INDEX queue_messages_read ON queue_messages (queue, vt, msg_id);
COMMENT ON INDEX queue_messages_read IS
  'read() and pop(): the visible messages of a queue (vt <= now), walked in (vt, msg_id) order so a LIMIT stops early; also counts depth and visible messages for metrics.';

CREATE TABLE queue_archive (
  msg_id      bigint PRIMARY KEY,
  queue       text COLLATE "C" NOT NULL,
  read_ct     integer NOT NULL,
  enqueued_at timestamptz NOT NULL,
  archived_at timestamptz NOT NULL DEFAULT statement_timestamp(),
  vt          timestamptz NOT NULL,
  message     jsonb NOT NULL
);

COMMENT ON TABLE queue_archive IS
  'Messages removed by archive(), kept for audit and debugging. Nothing reads it in the hot path; retention is the operator''s (delete old rows by archived_at).';
COMMENT ON COLUMN queue_archive.msg_id IS
  'The id the message had in queue_messages.';
COMMENT ON COLUMN queue_archive.queue IS
  'Queue the message belonged to.';
COMMENT ON COLUMN queue_archive.read_ct IS
  'How many times the message had been read when it was archived.';
COMMENT ON COLUMN queue_archive.enqueued_at IS
  'When the message was sent.';
COMMENT ON COLUMN queue_archive.archived_at IS
  'Start of the archiving statement.';
COMMENT ON COLUMN queue_archive.vt IS
  'The message''s visibility time when it was archived (the end of its last visibility timeout).';
COMMENT ON COLUMN queue_archive.message IS
  'The message payload, as sent.';
COMMENT ON INDEX queue_archive_pkey IS
  'One archived row per message id: a message is archived at most once.';
`,
};

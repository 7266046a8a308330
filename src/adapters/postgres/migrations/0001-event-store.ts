import type { Migration } from './migration.js';

// The event store: the ledger (`events`), the optimistic-concurrency row of each stream
// (`streams`) and state snapshots (`snapshots`). Stream names are collated "C" so a prefix read
// (`starts_with(stream, $1)`) becomes a range scan of the primary keys, and so names compare
// bytewise everywhere, whatever the database's default collation.
export const eventStore: Migration = {
  version: 1,
  name: 'event_store',
  sql: /* sql */ `
CREATE TABLE events (
  global_position bigint GENERATED ALWAYS AS IDENTITY,
  transaction_id  xid8 NOT NULL DEFAULT pg_current_xact_id(),
  stream          text COLLATE "C" NOT NULL,
  stream_revision bigint NOT NULL CHECK (stream_revision >= 0),
  type            text NOT NULL,
  data            jsonb NOT NULL,
  metadata        jsonb NOT NULL DEFAULT '{}',
  event_id        uuid NOT NULL UNIQUE,
  created         timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream, stream_revision)
);

COMMENT ON TABLE events IS
  'The ledger: every event of every stream, append-only. Global order is (transaction_id, global_position); read it only below pg_snapshot_xmin(pg_current_snapshot()), where no earlier event can still commit.';
COMMENT ON COLUMN events.global_position IS
  'Order of the event within its transaction (the identity is taken at insert, not at commit, so it alone is not a safe reading order). Second part of the global position.';
COMMENT ON COLUMN events.transaction_id IS
  'Id of the writing transaction. First part of the global position: every transaction below the current snapshot''s xmin has ended, so nothing can appear before a position read there.';
COMMENT ON COLUMN events.stream IS
  'Stream the event belongs to (one per concurrency key, job, queue cap...).';
COMMENT ON COLUMN events.stream_revision IS
  'Position of the event in its stream, 0 for the first; no gaps, since streams.revision is checked and bumped in the same statement.';
COMMENT ON COLUMN events.type IS
  'Event type name, part of the audit format (decoded by the domain).';
COMMENT ON COLUMN events.data IS
  'Event payload, a JSON object.';
COMMENT ON COLUMN events.metadata IS
  'Context of the write (who, why, correlation ids), a JSON object.';
COMMENT ON COLUMN events.event_id IS
  'Unique id of the event, given by the writer or random; lets subscribers and other stores deduplicate.';
COMMENT ON COLUMN events.created IS
  'Start time of the writing transaction.';
COMMENT ON INDEX events_event_id_key IS
  'An event id is written once across all streams.';
COMMENT ON INDEX events_pkey IS
  'Reads one stream in revision order, and (C collation) finds the streams of a prefix by range; also forbids two events at one revision.';

CREATE INDEX events_global_order ON events (transaction_id, global_position);
COMMENT ON INDEX events_global_order IS
  'Catch-up reads of all streams in global order, resuming strictly after a (transaction_id, global_position) row value.';

CREATE TABLE streams (
  stream         text COLLATE "C" PRIMARY KEY,
  revision       bigint NOT NULL CHECK (revision >= 0),
  transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id()
);

COMMENT ON INDEX streams_pkey IS
  'Finds the row an append checks and moves on; the row lock it takes serialises writers of one stream.';
COMMENT ON TABLE streams IS
  'One row per stream that has events: the optimistic-concurrency check. An append updates it WHERE revision = expected (or inserts it for no_stream) in the statement that inserts the events; its row lock serialises writers of one stream.';
COMMENT ON COLUMN streams.stream IS
  'Stream name, as in events.stream.';
COMMENT ON COLUMN streams.revision IS
  'Revision of the stream''s last event.';
COMMENT ON COLUMN streams.transaction_id IS
  'Transaction that wrote the last event. A writer whose own transaction id is older must not append after it, or the stream''s events would be out of revision order in the global order; the append retries in a new transaction instead.';

CREATE TABLE snapshots (
  stream         text COLLATE "C" NOT NULL,
  schema_version integer NOT NULL,
  revision       bigint NOT NULL CHECK (revision >= 0),
  state          jsonb NOT NULL,
  created        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream, schema_version)
);

COMMENT ON TABLE snapshots IS
  'Newest folded state of a stream per state schema version, so loading a long stream reads only the events after it.';
COMMENT ON COLUMN snapshots.stream IS
  'Stream whose events were folded.';
COMMENT ON COLUMN snapshots.schema_version IS
  'Version of the state''s shape; a reader ignores snapshots of another version and folds from the start.';
COMMENT ON COLUMN snapshots.revision IS
  'Revision of the last event folded into state; a save never replaces a newer one.';
COMMENT ON COLUMN snapshots.state IS
  'The folded state, a JSON object.';
COMMENT ON COLUMN snapshots.created IS
  'When the snapshot was written.';
COMMENT ON INDEX snapshots_pkey IS
  'One snapshot per (stream, schema_version); the upsert key, and finds a stream''s snapshots for load.';
`,
};

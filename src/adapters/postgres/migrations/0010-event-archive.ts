import type { Migration } from './migration.js';

// Retention (issue 12): `jobledger archive --before <date>` moves the events of jobs that
// finished before that date out of the live table `events` into `events_archive`, so the table
// every flush reads and appends to stays the size of the work in flight, not of all history.
// Nothing is lost or rewritten: the rows keep their stream, revision and global position, and
// every reader of history (readStream, readAll, a rebuild, `state --at`, audit, `replay --verify`)
// reads both tables through the view `ledger_events`, so what they answer does not change. The
// key writer's lock reads the archive only for a stream whose state it must build from before
// the newest archived revision (streams.archived_revision), never on a flush of a key it holds.
export const eventArchive: Migration = {
  version: 10,
  name: 'event-archive',
  sql: /* sql */ `
CREATE TABLE events_archive (
  global_position bigint NOT NULL,
  transaction_id  xid8 NOT NULL,
  stream          text COLLATE "C" NOT NULL,
  stream_revision bigint NOT NULL CHECK (stream_revision >= 0),
  type            text NOT NULL,
  data            jsonb NOT NULL,
  metadata        jsonb NOT NULL,
  event_id        uuid NOT NULL UNIQUE,
  created         timestamptz NOT NULL,
  archived        timestamptz NOT NULL DEFAULT statement_timestamp(),
  PRIMARY KEY (stream, stream_revision)
);
COMMENT ON TABLE events_archive IS
  'Events moved out of events by jobledger archive: every event (on its home stream and its limit keys) of a job that finished before the cut. Same rows as in events, untouched; read with events through the view ledger_events. Written only by src/adapters/postgres/archive.ts.';
COMMENT ON COLUMN events_archive.global_position IS 'As in events: the position it was appended at (no identity: it keeps the one events gave it).';
COMMENT ON COLUMN events_archive.transaction_id IS 'As in events: the transaction that appended it (global order is (transaction_id, global_position)).';
COMMENT ON COLUMN events_archive.stream IS 'As in events.';
COMMENT ON COLUMN events_archive.stream_revision IS 'As in events: its revision in the stream (the live table keeps the stream''s other revisions).';
COMMENT ON COLUMN events_archive.type IS 'As in events.';
COMMENT ON COLUMN events_archive.data IS 'As in events.';
COMMENT ON COLUMN events_archive.metadata IS 'As in events.';
COMMENT ON COLUMN events_archive.event_id IS 'As in events.';
COMMENT ON COLUMN events_archive.created IS 'As in events: when it was appended.';
COMMENT ON COLUMN events_archive.archived IS 'When jobledger archive moved it here.';
COMMENT ON INDEX events_archive_event_id_key IS
  'An event by its id, as events_event_id_key: a commit whose answer was lost, or an enqueue by job id, is looked up across both tables.';
COMMENT ON INDEX events_archive_pkey IS
  'A stream''s archived events in order (readStream, and the key writer''s lock for a stream it reads from before streams.archived_revision).';

CREATE INDEX events_archive_global_order ON events_archive (transaction_id, global_position);
COMMENT ON INDEX events_archive_global_order IS
  'Global order, as events_global_order: readAll and a rebuild walk both tables from a position, merged.';

ALTER TABLE streams ADD COLUMN archived_revision bigint;
COMMENT ON COLUMN streams.archived_revision IS
  'The newest revision of the stream moved to events_archive; NULL when none was. A reader that needs the stream from before it reads events_archive too.';

-- Every event, live or archived: what history is read from. UNION ALL over two tables with the
-- same keys: a row is in one of them at any moment (archive moves it in one statement), and the
-- planner pushes a reader's conditions into both and merges their index scans.
CREATE VIEW ledger_events AS
SELECT global_position, transaction_id, stream, stream_revision, type, data, metadata, event_id, created FROM events
UNION ALL
SELECT global_position, transaction_id, stream, stream_revision, type, data, metadata, event_id, created FROM events_archive;
COMMENT ON VIEW ledger_events IS
  'The whole ledger: events (live) and events_archive (jobs finished before an archive cut). Readers of history read this; appends go to events.';
COMMENT ON COLUMN ledger_events.global_position IS 'See events.global_position.';
COMMENT ON COLUMN ledger_events.transaction_id IS 'See events.transaction_id.';
COMMENT ON COLUMN ledger_events.stream IS 'See events.stream.';
COMMENT ON COLUMN ledger_events.stream_revision IS 'See events.stream_revision.';
COMMENT ON COLUMN ledger_events.type IS 'See events.type.';
COMMENT ON COLUMN ledger_events.data IS 'See events.data.';
COMMENT ON COLUMN ledger_events.metadata IS 'See events.metadata.';
COMMENT ON COLUMN ledger_events.event_id IS 'See events.event_id.';
COMMENT ON COLUMN ledger_events.created IS 'See events.created.';
`,
};

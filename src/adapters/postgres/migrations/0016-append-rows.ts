import type { Migration } from './migration.js';
import { APPEND_ROWS_DATA_SQL } from './0016-append-rows-data.js';

// Issue 22, levers 2, 3 and 6: fewer row versions and index entries per job, the audit whole.
// - One row per append to one stream (`appends`), carrying its events ("facts") in order, each
//   with its type, id, data and metadata: an unkeyed job is three rows (enqueued and admitted;
//   started; completed and released), not five, each with three index entries, not fifteen.
// - The view `events` unnests them into today's columns, one row per event, so every reader, test
//   and ad-hoc query keeps its shape; `events_archive` and `ledger_events` likewise. An event's
//   global position is its row's position × 2^20 + its index in the row: strictly increasing in
//   (transaction_id, global_position) order, as readers that resume after a position need.
// - No `streams` row for a job's own stream (`job:<id>`): its writers take an advisory lock on
//   the stream instead, and its revision is its last row's (the unique (stream, revision) key is
//   the backstop). Key streams keep theirs, with room on each page for HOT updates.
// - No unique index on every event id: only the ids that must be unique (a JobEnqueued whose job
//   id the caller gave, an id given through the event-store port) are written to
//   `unique_event_ids`, in the append's transaction.
// Existing ledgers are regrouped (0016-append-rows-data.ts): the events of one stream written by
// one transaction at consecutive revisions become one row, positions are renumbered in the same
// order, and the checkpoints and quarantines that name a position follow.
const APPENDS_COLUMNS = /* sql */ `
  transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
  stream         text COLLATE "C" NOT NULL,
  revision       bigint NOT NULL CHECK (revision >= 0),
  last_revision  bigint GENERATED ALWAYS AS (revision + cardinality(types) - 1) STORED,
  types          text[] NOT NULL CHECK (cardinality(types) BETWEEN 1 AND 1048576),
  ids            uuid[] NOT NULL,
  data           jsonb NOT NULL,
  metadata       jsonb NOT NULL DEFAULT '{}',
  metadatas      jsonb,
  created        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream, revision),
  CHECK (cardinality(ids) = cardinality(types) AND jsonb_array_length(data) = cardinality(types)
         AND (metadatas IS NULL OR jsonb_array_length(metadatas) = cardinality(types)))`;

/** The view of one event per row over a table of appends (`a`): today's columns of `events`. Migration 17 makes its views with it too: what it returns MUST NOT change (both have shipped). */
export const unnested = (table: string, extra = ''): string => /* sql */ `
SELECT (a.position << 20) + f.i - 1 AS global_position, a.transaction_id, a.stream, a.revision + f.i - 1 AS stream_revision,
       f.type, f.data, coalesce(f.metadata, a.metadata) AS metadata, f.event_id, a.created${extra}
FROM ${table} a
CROSS JOIN LATERAL ROWS FROM (unnest(a.types), unnest(a.ids), jsonb_array_elements(a.data), jsonb_array_elements(a.metadatas))
  WITH ORDINALITY AS f (type, event_id, data, metadata, i)`;

/** The comments of a table's or view's columns that are appends' own (but position): "As in appends.transaction_id." */
const seeAppends = (table: string, how: string): string =>
  ['transaction_id', 'stream', 'revision', 'last_revision', 'types', 'ids', 'data', 'metadata', 'metadatas', 'created']
    .map((column) => `COMMENT ON COLUMN ${table}.${column} IS '${how} appends.${column}.';`)
    .join('\n');

export const eventColumnComments = (view: string, of: string): string => /* sql */ `
COMMENT ON COLUMN ${view}.global_position IS 'The event''s position in its transaction: ${of}.position × 2^20 + its index in the row (0 for the first). Second part of the global position.';
COMMENT ON COLUMN ${view}.transaction_id IS 'As ${of}.transaction_id: the first part of the global position.';
COMMENT ON COLUMN ${view}.stream IS 'As ${of}.stream.';
COMMENT ON COLUMN ${view}.stream_revision IS 'The event''s revision in its stream: ${of}.revision + its index in the row.';
COMMENT ON COLUMN ${view}.type IS 'The event''s type, from ${of}.types.';
COMMENT ON COLUMN ${view}.data IS 'The event''s payload, from ${of}.data.';
COMMENT ON COLUMN ${view}.metadata IS 'The event''s metadata: its own from ${of}.metadatas, else the row''s ${of}.metadata.';
COMMENT ON COLUMN ${view}.event_id IS 'The event''s id, from ${of}.ids.';
COMMENT ON COLUMN ${view}.created IS 'As ${of}.created: the start of the writing transaction.';`;

export const appendRows: Migration = {
  version: 16,
  name: 'append-rows',
  sql: /* sql */ `
DROP VIEW ledger_events;

CREATE TABLE appends (
  position       bigint GENERATED ALWAYS AS IDENTITY,${APPENDS_COLUMNS}
);
COMMENT ON TABLE appends IS
  'The ledger: one row per append to one stream (a flush appends at most once per stream), its events in order. Append-only. Global order is (transaction_id, position, index in the row); read it only below pg_snapshot_xmin(pg_current_snapshot()). The view events shows one row per event.';
COMMENT ON COLUMN appends.position IS
  'Order of the row within its transaction (taken at insert, not at commit: with transaction_id, a safe reading order). Each event''s global position is position × 2^20 + its index in the row, so a row holds at most 2^20 events.';
COMMENT ON COLUMN appends.transaction_id IS
  'Id of the writing transaction. First part of the global position: every transaction below the current snapshot''s xmin has ended, so nothing can appear before a position read there. A job stream''s last writer is its last row''s.';
COMMENT ON COLUMN appends.stream IS
  'Stream the events belong to (key:<key> for a concurrency key, job:<jobId> for a job without one, ...).';
COMMENT ON COLUMN appends.revision IS
  'Revision of the row''s first event in its stream (0 for the stream''s first); the next row starts at last_revision + 1, no gaps: checked by each append against the stream''s revision.';
COMMENT ON COLUMN appends.last_revision IS
  'Revision of the row''s last event: the stream''s revision after this append (generated from revision and the number of events).';
COMMENT ON COLUMN appends.types IS
  'Each event''s type, in order (part of the audit format, decoded by the domain); its length is the row''s number of events (1 to 2^20).';
COMMENT ON COLUMN appends.ids IS
  'Each event''s id, in order: given by the writer or random. Not unique by itself: unique_event_ids holds the ids that must be.';
COMMENT ON COLUMN appends.data IS
  'Each event''s payload (a JSON object), in order: a JSON array as long as types.';
COMMENT ON COLUMN appends.metadata IS
  'Context of the write (who, why, correlation ids): every event''s metadata, unless metadatas says otherwise.';
COMMENT ON COLUMN appends.metadatas IS
  'Each event''s own metadata, in order, when they are not all the same (NULL when they are: then metadata is each one''s).';
COMMENT ON COLUMN appends.created IS
  'Start time of the writing transaction.';
COMMENT ON INDEX appends_pkey IS
  'A stream''s rows in revision order (the writer''s catch-up, readStream, a job stream''s last row), and (C collation) the streams of a prefix by range; forbids two rows starting at one revision: a job stream''s second writer fails on it.';

CREATE INDEX appends_global_order ON appends (transaction_id, position);
COMMENT ON INDEX appends_global_order IS
  'Catch-up reads of all streams in global order, resuming from the row of a (transaction_id, global position).';

CREATE TABLE appends_archive (
  position       bigint NOT NULL,${APPENDS_COLUMNS},
  archived       timestamptz NOT NULL DEFAULT statement_timestamp()
);
COMMENT ON TABLE appends_archive IS
  'Rows moved out of appends by jobledger archive: each names only jobs that finished before the cut (on their home stream and their limit keys). Same rows as in appends, untouched; read with appends through the view ledger_appends. Written only by src/adapters/postgres/archive.ts.';
COMMENT ON COLUMN appends_archive.position IS 'As in appends: the position it was appended at (no identity: it keeps the one appends gave it).';
${seeAppends('appends_archive', 'As in')}
COMMENT ON COLUMN appends_archive.archived IS 'When jobledger archive moved it here.';
COMMENT ON INDEX appends_archive_pkey IS
  'A stream''s archived rows in order (readStream; the writer''s lock of a stream it reads from before what the live table holds; a job stream''s revision once all its rows moved).';
CREATE INDEX appends_archive_global_order ON appends_archive (transaction_id, position);
COMMENT ON INDEX appends_archive_global_order IS
  'Global order, as appends_global_order: readAll and a rebuild walk both tables from a position, merged.';

CREATE TABLE unique_event_ids (
  event_id uuid PRIMARY KEY
);
COMMENT ON TABLE unique_event_ids IS
  'The event ids that must be unique across the ledger, written in the transaction that appends their event: a JobEnqueued whose job id the caller gave (uuidv5 of it: enqueuing the id again records nothing new), and every id given through the event-store port''s append. Ids the writer made up are not here: none can be asked for twice. Never archived.';
COMMENT ON COLUMN unique_event_ids.event_id IS
  'The id, as in appends.ids.';
COMMENT ON INDEX unique_event_ids_pkey IS
  'A second append of the id fails on it (DuplicateEventIdError); recordedEventIds and an enqueue of a given job id look ids up here.';
${APPEND_ROWS_DATA_SQL}
DROP TABLE events;
DROP TABLE events_archive;

CREATE VIEW events AS ${unnested('appends')};
COMMENT ON VIEW events IS
  'The live ledger, one row per event, in today''s columns: appends unnested (readers that need an index read appends itself). Appends go to appends.';
${eventColumnComments('events', 'appends')}

CREATE VIEW events_archive AS ${unnested('appends_archive', ', a.archived')};
COMMENT ON VIEW events_archive IS
  'The archived events, one row per event: appends_archive unnested.';
${eventColumnComments('events_archive', 'appends_archive')}
COMMENT ON COLUMN events_archive.archived IS 'As appends_archive.archived: when jobledger archive moved it.';

CREATE VIEW ledger_appends AS
SELECT position, transaction_id, stream, revision, last_revision, types, ids, data, metadata, metadatas, created FROM appends
UNION ALL
SELECT position, transaction_id, stream, revision, last_revision, types, ids, data, metadata, metadatas, created FROM appends_archive;
COMMENT ON VIEW ledger_appends IS
  'Every row of the ledger, live or archived: what history is read from (readStream, readAll, a rebuild). A row is in one of the two tables at any moment (archive moves it in one statement), and the planner pushes a reader''s conditions into both and merges their index scans.';
COMMENT ON COLUMN ledger_appends.position IS 'See appends.position.';
${seeAppends('ledger_appends', 'See')}

CREATE VIEW ledger_events AS
SELECT global_position, transaction_id, stream, stream_revision, type, data, metadata, event_id, created FROM events
UNION ALL
SELECT global_position, transaction_id, stream, stream_revision, type, data, metadata, event_id, created FROM events_archive;
COMMENT ON VIEW ledger_events IS
  'The whole ledger, one row per event: events (live) and events_archive. For ad-hoc reading; the ledger''s own readers read ledger_appends.';
${eventColumnComments('ledger_events', 'ledger_appends')}

-- A job stream has no streams row: its writers serialise on an advisory lock, so the row would
-- only be updated on every append (two row versions per unkeyed job). Key streams keep theirs;
-- the updates change no indexed column, and a page with room takes them as HOT updates.
DELETE FROM streams WHERE starts_with(stream, 'job:');
ALTER TABLE streams SET (fillfactor = 50);
COMMENT ON TABLE streams IS
  'One row per stream that has events, but a job''s own (job:<id>, serialised by an advisory lock and checked against its last row in appends): the optimistic-concurrency check. An append updates it WHERE revision = expected (or inserts it for no_stream) in the statement that inserts its row; its row lock serialises writers of one stream. Half of each page is left free so these updates stay HOT.';
COMMENT ON COLUMN streams.stream IS
  'Stream name, as in appends.stream.';
COMMENT ON COLUMN streams.archived_revision IS
  'The newest revision of the stream moved to appends_archive; NULL when none was. A reader that needs the stream from before it reads appends_archive too.';

CREATE OR REPLACE FUNCTION jl_check_read(checked_streams text[], expected bigint[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  moved text;
BEGIN
  -- A job stream's revision is its last row's: live, or archived once all of its rows moved.
  SELECT string_agg(c.stream, ', ' ORDER BY c.stream) INTO moved
  FROM unnest(checked_streams, expected) AS c (stream, revision)
  LEFT JOIN streams s ON s.stream = c.stream
  WHERE coalesce(s.revision, CASE WHEN starts_with(c.stream, 'job:') THEN (
          SELECT h.last_revision FROM (
            (SELECT last_revision FROM appends a WHERE a.stream = c.stream ORDER BY a.revision DESC LIMIT 1)
            UNION ALL
            (SELECT last_revision FROM appends_archive a WHERE a.stream = c.stream ORDER BY a.revision DESC LIMIT 1)
            LIMIT 1) h)
        END, -1) <> c.revision;
  IF moved IS NOT NULL THEN
    RAISE EXCEPTION 'streams read by the decision moved before it committed: %', moved USING ERRCODE = 'JL001', DETAIL = moved;
  END IF;
END
$$;
`,
};

import type { Migration } from './migration.js';
import { eventColumnComments, unnested } from './0016-append-rows.js';

// Issue 22, lever 4: retention by partition, not by moving rows. `appends` and `appends_archive`
// are partitioned by the week a row was inserted in (`week`, the Monday, UTC); `jobledger
// archive` moves a whole week out of the live ledger by detaching its partition from `appends`
// and attaching it to `appends_archive`, in one transaction and without rewriting a row (only
// the rows of jobs still unfinished are moved on to the current week first). The old one-by-one
// move stays for `archive --exact`.
// - Positions come from a sequence: a partitioned table has no identity column before
//   PostgreSQL 17.
// - A primary key of a partitioned table must hold its partition key: `(stream, revision, week)`.
//   Two rows of one stream at one revision are refused within a week; across weeks the revision
//   check of every append (streams row, or a job stream's last row read after its advisory lock)
//   is what refuses them, as it always was (the key was the backstop). A job stream created by
//   two enqueues at once needs the backstop: they are of a given job id (unique_event_ids
//   refuses the second) or of a random one (nobody else can create it).
// - `week` is taken from clock_timestamp() at insert, not from the transaction's start: a
//   stream's rows are inserted one writer after the other (its lock), so its weeks never go
//   backwards in revision order, and a week that has ended receives no row again.
// - Existing rows: live ones go to one partition holding every week before this one, archived
//   ones (moved one by one, as --exact still does) to appends_archive_rows, their week
//   '-infinity'.
// - Weeks are made ahead by jl_ensure_append_weeks (this migration, every ledger's open, the
//   sweeper's leader once an hour, archive): this week and the next. There is no default
//   partition: every statement on appends opens each partition, so each one costs every flush
//   (measured: 4 partitions cost 2–6% of the peer bench's jobs/s against none). A write that
//   finds its week missing (no process opened or swept for a week) fails, makes the weeks and
//   is run again (write-transaction.ts).

/**
 * The columns of both tables, as migration 16 defined them, with `week` and `archived`. The
 * CHECK constraints have the same names in both: ATTACH matches a partition's to its new
 * parent's by name.
 */
const COLUMNS = /* sql */ `
  position       bigint NOT NULL,
  transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
  stream         text COLLATE "C" NOT NULL,
  revision       bigint NOT NULL CONSTRAINT appends_revision CHECK (revision >= 0),
  last_revision  bigint GENERATED ALWAYS AS (revision + cardinality(types) - 1) STORED,
  types          text[] NOT NULL CONSTRAINT appends_types CHECK (cardinality(types) BETWEEN 1 AND 1048576),
  ids            uuid[] NOT NULL,
  data           jsonb NOT NULL,
  metadata       jsonb NOT NULL DEFAULT '{}',
  metadatas      jsonb,
  created        timestamptz NOT NULL DEFAULT now(),
  week           date NOT NULL,
  archived       timestamptz,
  PRIMARY KEY (stream, revision, week),
  CONSTRAINT appends_events CHECK (cardinality(ids) = cardinality(types) AND jsonb_array_length(data) = cardinality(types)
         AND (metadatas IS NULL OR jsonb_array_length(metadatas) = cardinality(types)))`;

const ALL = 'position, transaction_id, stream, revision, types, ids, data, metadata, metadatas, created';

const COLUMN_COMMENTS: Record<string, string> = {
  position: "Order of the row within its transaction (taken at insert from appends_position, not at commit: with transaction_id, a safe reading order). Each event's global position is position × 2^20 + its index in the row, so a row holds at most 2^20 events.",
  transaction_id: "Id of the writing transaction. First part of the global position: every transaction below the current snapshot's xmin has ended, so nothing can appear before a position read there. A job stream's last writer is its last row's.",
  stream: "Stream the events belong to (key:<key> for a concurrency key, job:<jobId> for a job without one, ...).",
  revision: "Revision of the row's first event in its stream (0 for the stream's first); the next row starts at last_revision + 1, no gaps: checked by each append against the stream's revision.",
  last_revision: "Revision of the row's last event: the stream's revision after this append (generated from revision and the number of events).",
  types: "Each event's type, in order (part of the audit format, decoded by the domain); its length is the row's number of events (1 to 2^20).",
  ids: "Each event's id, in order: given by the writer or random. Not unique by itself: unique_event_ids holds the ids that must be.",
  data: "Each event's payload (a JSON object), in order: a JSON array as long as types.",
  metadata: "Context of the write (who, why, correlation ids): every event's metadata, unless metadatas says otherwise.",
  metadatas: "Each event's own metadata, in order, when they are not all the same (NULL when they are: then metadata is each one's).",
  created: "Start time of the writing transaction (the events' recorded time).",
  week: "The partition key: the Monday (UTC) of the week the row was inserted in (clock_timestamp(), so never earlier than the stream's previous row's), or, for a row of an unfinished job that archive moved on out of a week it archived, the first week that run left live; '-infinity' for a row moved into the archive by itself (archive --exact, or before migration 17).",
  archived: "When jobledger archive moved this row into the archive by itself; NULL for a row archived with its whole week (jl_archived_weeks says when) and for every live row.",
};
const comments = (table: string, how: (column: string) => string): string =>
  Object.keys(COLUMN_COMMENTS).map((column) => `COMMENT ON COLUMN ${table}.${column} IS '${how(column).replaceAll("'", "''")}';`).join('\n');

export const appendWeeks: Migration = {
  version: 17,
  name: 'append-weeks',
  sql: /* sql */ `
DROP VIEW ledger_events;
DROP VIEW ledger_appends;
DROP VIEW events;
DROP VIEW events_archive;
ALTER TABLE appends RENAME TO appends_16;
ALTER INDEX appends_pkey RENAME TO appends_16_pkey;
ALTER INDEX appends_global_order RENAME TO appends_16_global_order;
ALTER TABLE appends_archive RENAME TO appends_archive_16;
ALTER INDEX appends_archive_pkey RENAME TO appends_archive_16_pkey;
ALTER INDEX appends_archive_global_order RENAME TO appends_archive_16_global_order;

CREATE SEQUENCE appends_position;
COMMENT ON SEQUENCE appends_position IS 'appends.position: an identity column''s sequence, which a partitioned table cannot have before PostgreSQL 17.';
SELECT setval('appends_position', coalesce((SELECT max(position) FROM appends_16), 0) + 1, false);

CREATE TABLE appends (${COLUMNS}) PARTITION BY RANGE (week);
ALTER TABLE appends ALTER COLUMN position SET DEFAULT nextval('appends_position');
ALTER TABLE appends ALTER COLUMN week SET DEFAULT date_trunc('week', clock_timestamp() AT TIME ZONE 'UTC')::date;
ALTER SEQUENCE appends_position OWNED BY appends.position;
COMMENT ON TABLE appends IS
  'The ledger: one row per append to one stream (a flush appends at most once per stream), its events in order. Append-only but for archive (which moves an unfinished job''s rows on to the current week before it archives their week). Partitioned by week: a partition per week (appends_wYYYYMMDD, its Monday), made ahead by jl_ensure_append_weeks, archived whole. Global order is (transaction_id, position, index in the row); read it only below pg_snapshot_xmin(pg_current_snapshot()). The view events shows one row per event.';
${comments('appends', (c) => COLUMN_COMMENTS[c]!)}
COMMENT ON INDEX appends_pkey IS
  'A stream''s rows in revision order, merged across the weeks (the writer''s catch-up, readStream, a job stream''s last row), and (C collation) the streams of a prefix by range; forbids two rows of one stream at one revision within a week.';
CREATE INDEX appends_global_order ON appends (transaction_id, position);
COMMENT ON INDEX appends_global_order IS
  'Catch-up reads of all streams in global order, resuming from the row of a (transaction_id, global position).';

CREATE TABLE appends_archive (${COLUMNS}) PARTITION BY RANGE (week);
-- A row inserted here is one moved by itself (archive's row-by-row move names both anyway).
ALTER TABLE appends_archive ALTER COLUMN week SET DEFAULT '-infinity', ALTER COLUMN archived SET DEFAULT statement_timestamp();
COMMENT ON TABLE appends_archive IS
  'The archived rows: each names only jobs that finished before a cut of jobledger archive (on their home stream and their limit keys). Its partitions are the weeks archive detached from appends (jl_archived_weeks), untouched, and appends_archive_rows, the rows moved one by one. Same rows as in appends; read with appends through the view ledger_appends. Written only by src/adapters/postgres/archive.ts.';
${comments('appends_archive', (c) => (c === 'week' || c === 'archived' ? COLUMN_COMMENTS[c]! : `As in appends.${c}.`))}
COMMENT ON INDEX appends_archive_pkey IS
  'A stream''s archived rows in order (readStream; the writer''s lock of a stream it reads from before what the live table holds; a job stream''s revision once all its rows moved). The same index as appends_pkey, so a week''s partition keeps its own when it is attached here.';
CREATE INDEX appends_archive_global_order ON appends_archive (transaction_id, position);
COMMENT ON INDEX appends_archive_global_order IS
  'Global order, as appends_global_order: readAll and a rebuild walk both tables from a position, merged.';
CREATE TABLE appends_archive_rows PARTITION OF appends_archive FOR VALUES FROM (MINVALUE) TO ('0001-01-01');
COMMENT ON TABLE appends_archive_rows IS
  'The rows archive moved into the archive one by one (archive --exact, and every row archived before migration 17): week ''-infinity''.';

INSERT INTO appends_archive (${ALL}, week, archived)
SELECT ${ALL}, '-infinity', archived FROM appends_archive_16;

CREATE TABLE jl_archived_weeks (
  week_partition text PRIMARY KEY,
  week_from      date NOT NULL,
  week_to        date NOT NULL,
  archived       timestamptz NOT NULL DEFAULT now(),
  cut            timestamptz NOT NULL,
  rows           bigint NOT NULL,
  events         bigint NOT NULL,
  moved_on       bigint NOT NULL
);
COMMENT ON TABLE jl_archived_weeks IS
  'The weeks jobledger archive moved whole from appends to appends_archive (a partition each): what was archived, when, at which cut. Written by src/adapters/postgres/archive.ts.';
COMMENT ON COLUMN jl_archived_weeks.week_partition IS 'The partition, a table of appends_archive since (appends_wYYYYMMDD, or appends_before_wYYYYMMDD for the rows migration 17 found).';
COMMENT ON COLUMN jl_archived_weeks.week_from IS 'Its first week (a Monday): its rows'' week is in [week_from, week_to).';
COMMENT ON COLUMN jl_archived_weeks.week_to IS 'The Monday after its last week.';
COMMENT ON COLUMN jl_archived_weeks.archived IS 'When archive attached it to appends_archive.';
COMMENT ON COLUMN jl_archived_weeks.cut IS 'The run''s --before: every job its rows name had finished before it.';
COMMENT ON COLUMN jl_archived_weeks.rows IS 'Rows it holds.';
COMMENT ON COLUMN jl_archived_weeks.events IS 'Events it holds.';
COMMENT ON COLUMN jl_archived_weeks.moved_on IS 'Rows of jobs not finished before the cut that archive moved on from it to the current week first.';
COMMENT ON INDEX jl_archived_weeks_pkey IS 'One entry per archived partition.';

-- Creates the partitions of appends for this week and the next ahead ones, each with a comment.
-- Creates each empty and attaches it: ATTACH takes a SHARE UPDATE EXCLUSIVE lock on appends, which does
-- not wait for (or block) the ledger's reads and writes, where CREATE TABLE … PARTITION OF would
-- take an ACCESS EXCLUSIVE one. Serialised by an advisory lock: two callers at once create each
-- week once. Returns how many it created.
CREATE FUNCTION jl_ensure_append_weeks(ahead integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  w date;
  part text;
  made integer := 0;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('jobledger:append-weeks', 0));
  FOR i IN 0..ahead LOOP
    w := date_trunc('week', (clock_timestamp() AT TIME ZONE 'UTC') + make_interval(weeks => i))::date;
    part := 'appends_w' || to_char(w, 'YYYYMMDD');
    CONTINUE WHEN to_regclass(part) IS NOT NULL;
    EXECUTE format('CREATE TABLE %I (LIKE appends INCLUDING DEFAULTS INCLUDING GENERATED INCLUDING CONSTRAINTS)', part);
    EXECUTE format('ALTER TABLE appends ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, w, w + 7);
    EXECUTE format('COMMENT ON TABLE %I IS %L', part, format('The rows of appends inserted in the week from Monday %s (UTC): a partition of appends, which jobledger archive moves whole to appends_archive.', w));
    made := made + 1;
  END LOOP;
  RETURN made;
END
$$;
COMMENT ON FUNCTION jl_ensure_append_weeks(integer) IS 'Creates the weekly partitions of appends from this week to ahead weeks on (see migration 17).';

-- The metrics' count of a ledger table's events, summed over its partitions: the planner's row
-- estimate of each analyzed one (scaled to its current size) times the events of the table's
-- newest 1,000 rows, an exact count of each one never analyzed (a young week's: small), nothing
-- for an empty one. A catalog read and two index walks, not a scan of the ledger.
CREATE FUNCTION jl_estimated_events(parent regclass) RETURNS float8 LANGUAGE plpgsql STABLE AS $$
DECLARE
  leaf record;
  total float8 := 0;
  per_row float8;
  n float8;
BEGIN
  FOR leaf IN SELECT c.oid::regclass AS rel, c.reltuples, c.relpages FROM pg_partition_tree(parent) t JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf LOOP
    IF pg_relation_size(leaf.rel) = 0 THEN
      CONTINUE;
    ELSIF leaf.reltuples >= 0 AND leaf.relpages > 0 THEN
      IF per_row IS NULL THEN
        EXECUTE format('SELECT coalesce(avg(cardinality(n.types)), 1) FROM (SELECT types FROM %s ORDER BY transaction_id DESC, position DESC LIMIT 1000) n', parent) INTO per_row;
      END IF;
      total := total + round(leaf.reltuples / leaf.relpages * (pg_relation_size(leaf.rel) / current_setting('block_size')::int) * per_row);
    ELSE
      EXECUTE format('SELECT coalesce(sum(cardinality(types)), 0) FROM %s', leaf.rel) INTO n;
      total := total + n;
    END IF;
  END LOOP;
  RETURN total;
END
$$;
COMMENT ON FUNCTION jl_estimated_events(regclass) IS 'The events of appends or appends_archive, estimated from the catalog (the metrics and the page; see migration 17).';

-- The live rows found here: one partition of every week before this one, archived whole once a
-- cut passes this Monday.
DO $$
DECLARE
  monday date := date_trunc('week', clock_timestamp() AT TIME ZONE 'UTC')::date;
  part text := 'appends_before_w' || to_char(monday, 'YYYYMMDD');
BEGIN
  IF EXISTS (SELECT FROM appends_16 WHERE created < monday) THEN
    EXECUTE format('CREATE TABLE %I PARTITION OF appends FOR VALUES FROM (%L) TO (%L)', part, '0001-01-01', monday);
    EXECUTE format('COMMENT ON TABLE %I IS %L', part, format('The rows of appends inserted before Monday %s (UTC), found by migration 17: a partition of appends, which jobledger archive moves whole to appends_archive.', monday));
  END IF;
END
$$;
SELECT jl_ensure_append_weeks(1);
-- A row created after this week's Monday (a clock ahead) is put in this week.
INSERT INTO appends (${ALL}, week)
SELECT ${ALL}, least(greatest(date_trunc('week', created AT TIME ZONE 'UTC')::date, '0001-01-01'), date_trunc('week', clock_timestamp() AT TIME ZONE 'UTC')::date) FROM appends_16;

DROP TABLE appends_16;
DROP TABLE appends_archive_16;

CREATE VIEW events AS ${unnested('appends')};
COMMENT ON VIEW events IS
  'The live ledger, one row per event, in today''s columns: appends unnested (readers that need an index read appends itself). Appends go to appends.';
${eventColumnComments('events', 'appends')}

CREATE VIEW events_archive AS ${unnested('appends_archive', ', coalesce(a.archived, (SELECT w.archived FROM jl_archived_weeks w WHERE w.week_partition = a.tableoid::regclass::text)) AS archived')};
COMMENT ON VIEW events_archive IS
  'The archived events, one row per event: appends_archive unnested.';
${eventColumnComments('events_archive', 'appends_archive')}
COMMENT ON COLUMN events_archive.archived IS 'When jobledger archive moved it: the row''s own time (appends_archive.archived), else its week''s (jl_archived_weeks.archived).';

CREATE VIEW ledger_appends AS
SELECT position, transaction_id, stream, revision, last_revision, types, ids, data, metadata, metadatas, created FROM appends
UNION ALL
SELECT position, transaction_id, stream, revision, last_revision, types, ids, data, metadata, metadatas, created FROM appends_archive;
COMMENT ON VIEW ledger_appends IS
  'Every row of the ledger, live or archived: what history is read from (readStream, readAll, a rebuild). A row is in one of the two tables at any moment (archive moves a row in one statement, and a week in one transaction), and the planner pushes a reader''s conditions into both and merges their index scans.';
${comments('ledger_appends', (c) => `See appends.${c}.`).split('\n').filter((line) => !/\.(week|archived) IS/.test(line)).join('\n')}

CREATE VIEW ledger_events AS
SELECT global_position, transaction_id, stream, stream_revision, type, data, metadata, event_id, created FROM events
UNION ALL
SELECT global_position, transaction_id, stream, stream_revision, type, data, metadata, event_id, created FROM events_archive;
COMMENT ON VIEW ledger_events IS
  'The whole ledger, one row per event: events (live) and events_archive. For ad-hoc reading; the ledger''s own readers read ledger_appends.';
${eventColumnComments('ledger_events', 'ledger_appends')}
`,
};

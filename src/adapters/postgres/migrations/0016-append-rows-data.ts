// The data part of migration 16 (./0016-append-rows.ts): the per-event rows of `events` and
// `events_archive` (still tables here) become rows per append, before those tables are dropped.
//
// A row groups the events of one stream that one transaction wrote at consecutive revisions, with
// no event of another stream (or of the other table) between them in that transaction's order:
// so the new order (transaction_id, row position × 2^20 + index) is exactly the old order
// (transaction_id, global_position). A row's position is its first event's old global position
// (old positions are unique across both tables), so rows sort as their events did; the identity
// goes on past the largest. A group of more than 2^20 events (never written by jobledger) is cut
// into rows of 2^20. The async runners' checkpoints and the quarantines name an event's position:
// they are moved to the new position of that event (for a checkpoint, of the last event at or
// before it in its transaction: whatever was applied stays applied, nothing more).
export const APPEND_ROWS_DATA_SQL = /* sql */ `
CREATE TEMP TABLE jl_m16_facts ON COMMIT DROP AS
WITH f AS (
  SELECT global_position AS gp, transaction_id, stream, stream_revision, false AS archived FROM events
  UNION ALL
  SELECT global_position, transaction_id, stream, stream_revision, true FROM events_archive
),
o AS (
  SELECT f.*, CASE WHEN lag(stream) OVER w = stream AND lag(stream_revision) OVER w = stream_revision - 1 AND lag(archived) OVER w = archived THEN 0 ELSE 1 END AS starts
  FROM f WINDOW w AS (PARTITION BY transaction_id ORDER BY gp)
),
r AS (SELECT o.*, sum(starts) OVER (PARTITION BY transaction_id ORDER BY gp) AS run FROM o),
numbered AS (SELECT r.*, row_number() OVER (PARTITION BY transaction_id, run ORDER BY gp) - 1 AS k FROM r)
SELECT gp, transaction_id, archived, k & 1048575 AS idx,
       first_value(gp) OVER (PARTITION BY transaction_id, run, k >> 20 ORDER BY gp) AS row_position
FROM numbered;
CREATE UNIQUE INDEX ON jl_m16_facts (gp);
ANALYZE jl_m16_facts;

INSERT INTO appends (position, transaction_id, stream, revision, types, ids, data, metadata, metadatas, created) OVERRIDING SYSTEM VALUE
SELECT m.row_position, m.transaction_id, min(e.stream), min(e.stream_revision), array_agg(e.type ORDER BY e.global_position), array_agg(e.event_id ORDER BY e.global_position),
       jsonb_agg(e.data ORDER BY e.global_position), (array_agg(e.metadata ORDER BY e.global_position))[1],
       CASE WHEN count(DISTINCT e.metadata) > 1 THEN jsonb_agg(e.metadata ORDER BY e.global_position) END, min(e.created)
FROM events e JOIN jl_m16_facts m ON m.gp = e.global_position
GROUP BY m.row_position, m.transaction_id;

INSERT INTO appends_archive (position, transaction_id, stream, revision, types, ids, data, metadata, metadatas, created, archived)
SELECT m.row_position, m.transaction_id, min(e.stream), min(e.stream_revision), array_agg(e.type ORDER BY e.global_position), array_agg(e.event_id ORDER BY e.global_position),
       jsonb_agg(e.data ORDER BY e.global_position), (array_agg(e.metadata ORDER BY e.global_position))[1],
       CASE WHEN count(DISTINCT e.metadata) > 1 THEN jsonb_agg(e.metadata ORDER BY e.global_position) END, min(e.created), max(e.archived)
FROM events_archive e JOIN jl_m16_facts m ON m.gp = e.global_position
GROUP BY m.row_position, m.transaction_id;

SELECT setval(pg_get_serial_sequence('appends', 'position'), coalesce(max(gp), 1), max(gp) IS NOT NULL) FROM jl_m16_facts;

-- Which ids had to be unique then cannot be told apart now: every enqueue's id is kept (a job id
-- enqueued again must still record nothing), and every id of a stream that is not the key
-- writer's (written through the event-store port).
INSERT INTO unique_event_ids (event_id)
SELECT event_id FROM events WHERE type = 'JobEnqueued' OR NOT (starts_with(stream, 'key:') OR starts_with(stream, 'job:'))
UNION
SELECT event_id FROM events_archive WHERE type = 'JobEnqueued' OR NOT (starts_with(stream, 'key:') OR starts_with(stream, 'job:'));

-- A checkpoint whose transaction wrote no event is before or after all of it: its prepare part
-- compares with nothing, and stays (an EventStoreDB runner's checkpoint among them).
UPDATE projection_checkpoints c
SET prepare = coalesce((SELECT max((m.row_position << 20) + m.idx) FROM jl_m16_facts m WHERE m.transaction_id = c.commit::text::xid8 AND m.gp <= c.prepare), 0)
WHERE EXISTS (SELECT FROM jl_m16_facts m WHERE m.transaction_id = c.commit::text::xid8);

UPDATE jl_quarantined q SET position = (m.row_position << 20) + m.idx
FROM jl_m16_facts m WHERE m.gp = q.position AND m.transaction_id = q.commit_id;
`;

import type { GlobalPosition, RecordedEvent } from '../../../domain/ports/event-store.js';
import { eventsOfRow, rowColumns, rowOfPrepare, rowsFrom, type LedgerRow } from '../../../projections/ledger-rows.js';

/** Channel notified at the commit of each transaction that appended (the payload is empty: a subscriber reads from its position). */
export const EVENTS_CHANNEL = 'jobledger_events';

// The event store's reads of history (./postgres-event-store.ts), on the rows of the ledger
// (ledger_appends: live and archived), each found by an index condition, expanded into events
// here. The rows of a stream from a revision start with the one that holds it (revision <= it).

const fromRevision = (stream: string, from: string): string => rowsFrom('ledger_appends', 'a', stream, from);

// $1 stream, $2 first revision, $3 events at most (NULL: all). A row holds one event or more,
// at consecutive revisions: the rows that start before $2 + $3 hold the events asked for, and
// the last may hold more. This MUST bound revisions, not rows: a LIMIT of $3 rows read every row
// after $2 when rows hold many events (an enqueue of 1,000 jobs is one row of 2,000 events), so
// a stream read a page at a time was read again at every page.
export const READ_STREAM_SQL = `SELECT ${rowColumns('a')} FROM ledger_appends a
WHERE ${fromRevision('$1', '$2')} AND ($3::bigint IS NULL OR a.revision < $2::bigint + $3::bigint)
ORDER BY a.revision`;

// $1 streams, $2 the first revision of each.
export const READ_STREAMS_SQL = `
SELECT ${rowColumns('a')} FROM unnest($1::text[], $2::bigint[]) AS w (stream, from_revision)
CROSS JOIN LATERAL (SELECT * FROM ledger_appends a WHERE ${fromRevision('w.stream', 'w.from_revision')}) a
ORDER BY a.stream, a.revision`;

// $1 job ids, $2 key streams, $3 event types left out: the events of those streams that name any
// of the jobs (their data's jobId) and are of another type, one per result row (EventRow, ledger-rows.ts). The
// rows holding them are found by appends_job_ids and appends_archive_job_ids (migration 18), whose
// expression and predicate this repeats; their events are picked out here, in the database: a row
// is one append, and an enqueue of 1,000 jobs is one row of 2,000 events (~290 KB on bench:reads),
// of which a job's history wants two.
export const READ_JOB_EVENTS_SQL = `SELECT a.position, a.transaction_id::text AS transaction_id_text, a.stream, (a.revision + e.i - 1)::text AS revision,
       (e.i - 1)::int AS index, a.types[e.i] AS type, a.ids[e.i]::text AS id, e.data, coalesce(a.metadatas -> (e.i::int - 1), a.metadata) AS metadata, a.created
FROM ledger_appends a CROSS JOIN LATERAL jsonb_array_elements(a.data) WITH ORDINALITY AS e (data, i)
WHERE a.stream = ANY($2::text[]) AND NOT starts_with(a.stream, 'job:') AND jl_job_ids(a.data) && $1::text[]
  AND NOT (a.types <@ $3::text[])
  AND e.data->>'jobId' = ANY($1::text[]) AND NOT (a.types[e.i] = ANY($3::text[]))
ORDER BY a.stream, a.revision, e.i`;

// $1 job streams (job:<id>), $2 event types left out: their rows that hold an event of another
// type, by the primary key (a job stream is its job's alone).
export const READ_JOB_STREAM_ROWS_SQL = `SELECT ${rowColumns('a')} FROM ledger_appends a
WHERE a.stream = ANY($1::text[]) AND NOT (a.types <@ $2::text[])
ORDER BY a.stream, a.revision`;

// $1 a job id, $2 job streams, $3 key streams: the job's lease renewals on them, one row per
// (stream, lease): how many, the first and the last revision. Counted here rather than read: a
// job renewed 5,000 times has 5,000 renewals and a handful of other events (its history shows a
// run as one line). Key streams' rows by appends_job_ids (migration 18; its predicate repeated),
// job streams' by the primary key.
export const READ_JOB_RENEWALS_SQL = `
SELECT r.stream, r.data->>'leaseId' AS lease_id, count(*)::int AS count, min(r.revision)::text AS first_revision, max(r.revision)::text AS last_revision
FROM (
  SELECT a.stream, a.revision + e.i - 1 AS revision, e.data
  FROM ledger_appends a CROSS JOIN LATERAL jsonb_array_elements(a.data) WITH ORDINALITY AS e (data, i)
  WHERE a.stream = ANY($2::text[]) AND 'LeaseRenewed' = ANY(a.types) AND a.types[e.i] = 'LeaseRenewed'
  UNION ALL
  SELECT a.stream, a.revision + e.i - 1 AS revision, e.data
  FROM ledger_appends a CROSS JOIN LATERAL jsonb_array_elements(a.data) WITH ORDINALITY AS e (data, i)
  WHERE a.stream = ANY($3::text[]) AND NOT starts_with(a.stream, 'job:') AND jl_job_ids(a.data) && ARRAY[$1::text]
    AND 'LeaseRenewed' = ANY(a.types) AND a.types[e.i] = 'LeaseRenewed' AND e.data->>'jobId' = $1::text
) r
GROUP BY r.stream, r.data->>'leaseId'
ORDER BY r.stream, min(r.revision)`;

/** The events of rows read from `from` on, at most `maxCount`. */
export const eventsFrom = (rows: readonly LedgerRow[], from: number, maxCount?: number): RecordedEvent[] => {
  const out = rows.flatMap((row) => eventsOfRow(row, from));
  return maxCount === undefined ? out : out.slice(0, maxCount);
};

// The rows after a position ($1, $2: the commit part and the row of the prepare part; that row
// again, since the position may fall inside it), below the snapshot's xmin: every transaction
// there has ended, so no event can still appear before what this returns; above it, one still
// open (with a smaller id than events already committed) would be skipped by a reader that moved
// past them. $3: rows at most (NULL: all); $4: a stream prefix.
const AFTER = (prefix: boolean, from = '>='): string => `(transaction_id, position) ${from} ($1::xid8, $2::bigint)
         AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
         ${prefix ? 'AND starts_with(stream, $4)' : ''}`;

/**
 * readAll's statement: up to $3 rows (the caller keeps $3 events), or (`wholeTransactions`) the
 * rows of every transaction up to the one of the row that brings $3 events (counted from the row
 * after the position's: the rest of that one come on top).
 */
export const readAllSql = (prefix: boolean, wholeTransactions: boolean): string =>
  wholeTransactions
    ? `SELECT ${rowColumns('a')} FROM ledger_appends a
       WHERE ${AFTER(prefix)}
         AND transaction_id <= coalesce(
           (SELECT transaction_id FROM (
              SELECT transaction_id, sum(cardinality(types)) OVER (ORDER BY transaction_id, position) AS events FROM ledger_appends WHERE ${AFTER(prefix, '>')}
            ) upto WHERE events >= $3::bigint LIMIT 1),
           '18446744073709551615'::xid8)
       ORDER BY transaction_id, position`
    : `SELECT ${rowColumns('a')} FROM ledger_appends a WHERE ${AFTER(prefix)} ORDER BY transaction_id, position LIMIT $3::bigint + 1`;

/** readAll's parameters ($1, $2) for rows from the one of `after`. */
export const afterParameters = (after: GlobalPosition): string[] => [after.commit.toString(), rowOfPrepare(after.prepare).position.toString()];

import type { JsonObject } from '../../../domain/ports/event-store.js';
import { EVENT_COLUMNS, EVENTS_CHANNEL } from './event-rows.js';

// The statements of a write transaction (./write-transaction.ts) on the event store's tables:
// lock and catch up, append, check what was only read, save snapshots, notify.

/** An event as WRITE_SQL takes it ($2: one JSON array of these). */
export interface WireEvent {
  readonly stream: string;
  readonly revision: number;
  readonly type: string;
  readonly data: JsonObject;
  readonly metadata: JsonObject;
  readonly event_id: string;
}

// Generic plans for this transaction's prepared statements: with array parameters PostgreSQL
// would otherwise plan them anew on every execution (custom plans), which cost more than running
// them (measured: about 0.1 ms a statement, half a flush's time on one key). Their generic plans
// find every row by primary key (see read-models.ts), whatever the batch.
export const BEGIN_SQL = `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL plan_cache_mode = force_generic_plan`;

export interface LockRow {
  stream: string;
  revision: string;
  writer: string;
  xid: string;
  snapshot_revision: string | null;
  stream_revision: string | null;
}

/**
 * The archived events a lock must read (see migration 0010): only those of a stream whose state
 * is built from before its newest archived revision, a one-time filter the planner checks before
 * touching events_archive, so a flush on a stream its writer holds never reads the archive.
 */
const FROM_ARCHIVE = (archivedRevision: string, after: string, stream: string): string =>
  `${archivedRevision} > ${after} AND a.stream = ${stream} AND a.stream_revision > ${after}`;

// The streams to write ($1, sorted), locked in name order ("C" collation): two transactions
// sharing streams take them in the same order and queue up instead of deadlocking (LockRows sits
// above the sort, so rows are locked in that order). Each row's transaction_id tells whether a
// younger transaction wrote it last (the caller then defers the stream). With each stream comes
// what the caller lacks ($2: the revision its state is at, -1 none, NULL: lock only): the revision
// of a newer snapshot ($3: schema version), and the events after it or after $2. Those are read
// in the statement's snapshot, which predates any lock it waited for: lock() reads such a stream
// again (SNAPSHOTS_SQL, DELTAS_SQL). A stream this process wrote last costs one probe of events.
export const LOCK_SQL = `
WITH w AS (SELECT * FROM unnest($1::text[], $2::bigint[]) AS w (stream, after)),
locked AS MATERIALIZED (
  SELECT stream, revision, transaction_id, archived_revision FROM streams WHERE stream = ANY($1::text[]) ORDER BY stream FOR UPDATE
)
SELECT l.stream, l.revision::text AS revision, l.transaction_id::text AS writer, pg_current_xact_id()::text AS xid,
       s.revision::text AS snapshot_revision,
       e.global_position, e.transaction_id_text, e.stream_revision, e.type, e.data, e.metadata, e.event_id, e.created
FROM locked l
JOIN w ON w.stream = l.stream
LEFT JOIN snapshots s ON s.stream = l.stream AND s.schema_version = $3 AND s.revision > w.after
LEFT JOIN LATERAL (
  SELECT ${EVENT_COLUMNS} FROM events
  WHERE events.stream = l.stream AND l.revision > w.after AND events.stream_revision > greatest(w.after, coalesce(s.revision, -1))
  UNION ALL
  SELECT ${EVENT_COLUMNS} FROM events_archive a
  WHERE l.revision > w.after AND ${FROM_ARCHIVE('l.archived_revision', 'greatest(w.after, coalesce(s.revision, -1))', 'l.stream')}
  ORDER BY stream_revision
) e ON true
ORDER BY l.stream, e.stream_revision`;

// Snapshots newer than the caller's state ($1 streams, $2 revision each is at, -1: none; $3
// schema version), for streams LOCK_SQL could not bring up to date. Run once the streams are
// held: nobody else can save a snapshot of a locked stream (saves happen under the lock).
export const SNAPSHOTS_SQL = `
SELECT s.stream, s.revision::text AS revision, s.state
FROM unnest($1::text[], $2::bigint[]) AS w (stream, after)
JOIN snapshots s ON s.stream = w.stream AND s.schema_version = $3 AND s.revision > w.after`;

// Every event after the caller's state (or after the newer snapshot SNAPSHOTS_SQL returns).
export const DELTAS_SQL = `
SELECT e.* FROM unnest($1::text[], $2::bigint[]) AS w (stream, after)
JOIN streams st ON st.stream = w.stream
CROSS JOIN LATERAL (SELECT greatest(w.after, coalesce((SELECT s.revision FROM snapshots s WHERE s.stream = w.stream AND s.schema_version = $3 AND s.revision > w.after), -1)) AS after) f
CROSS JOIN LATERAL (
  SELECT ${EVENT_COLUMNS} FROM events
  WHERE events.stream = w.stream AND events.stream_revision > f.after
  UNION ALL
  SELECT ${EVENT_COLUMNS} FROM events_archive a
  WHERE ${FROM_ARCHIVE('st.archived_revision', 'f.after', 'w.stream')}
  ORDER BY stream_revision
) e
ORDER BY e.stream, e.stream_revision`;

// The appends of a flush. $1: one row per stream (stream, expected revision or -1, revision
// after); $2: the events, in order, each with its revision; $3: the streams again, for the
// planner (see read-models.ts: found by primary key however many streams there are). This MUST stay one statement: the
// expected-revision check and the writes are one step, and it is the check, not the lock taken
// before, that keeps every limit. A stream whose row did not move as expected (another revision,
// or a last writer younger than this transaction: see streams.transaction_id) gets no claimed
// row, so its events get a NULL revision and the NOT NULL constraint fails the whole statement
// (and transaction) instead of writing around a conflict (StaleStateError); a stream created
// meanwhile fails on streams_pkey (the writer runs the flush again).
const WRITE_SQL = `
WITH s AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS s (stream text, expected bigint, revision bigint)
),
moved AS (
  UPDATE streams t SET revision = s.revision, transaction_id = pg_current_xact_id()
  FROM s WHERE t.stream = ANY ($3::text[]) AND t.stream = s.stream AND s.expected >= 0 AND t.revision = s.expected AND t.transaction_id <= pg_current_xact_id()
  RETURNING t.stream
),
created AS (
  INSERT INTO streams (stream, revision)
  SELECT stream, revision FROM s WHERE s.expected < 0 ORDER BY stream
  RETURNING stream
),
claimed AS (SELECT stream FROM moved UNION ALL SELECT stream FROM created),
written AS (
  INSERT INTO events (stream, stream_revision, type, data, metadata, event_id)
  SELECT e.stream, CASE WHEN c.stream IS NOT NULL THEN e.revision END, e.type, e.data, coalesce(e.metadata, '{}'), e.event_id
  FROM ROWS FROM (jsonb_to_recordset($2::jsonb) AS (stream text, revision bigint, type text, data jsonb, metadata jsonb, event_id uuid))
       WITH ORDINALITY AS e (stream, revision, type, data, metadata, event_id, ord)
  LEFT JOIN claimed c ON c.stream = e.stream
  ORDER BY e.ord
  RETURNING stream, stream_revision, global_position
)`;
/** Where each written event sits: for append(), which reports positions; a flush needs none. */
export const WRITE_RETURNING_SQL = `${WRITE_SQL}
SELECT stream, stream_revision::text AS revision, global_position::text AS position, pg_current_xact_id()::text AS xid FROM written`;
export const WRITE_FLUSH_SQL = `${WRITE_SQL}
SELECT count(*) FROM written`;

// The streams the flush's decisions only read, each at the revision decided on (-1: absent), checked
// before anything is written (migration 0013's jl_check_read; it raises, failing the transaction).
// Streams that exist were locked by this transaction (LOCK_SQL), so none can move between this
// check and COMMIT; one that did not exist may be created meanwhile by a transaction that read
// nothing of this one's, which is then ordered after it.
export const READ_CHECK_SQL = `SELECT jl_check_read($1::text[], $2::bigint[])`;

export const SAVE_SNAPSHOTS_SQL = `
INSERT INTO snapshots (stream, schema_version, revision, state)
SELECT stream, schema_version, revision, state FROM jsonb_to_recordset($1::jsonb) AS x (stream text, schema_version int, revision bigint, state jsonb)
ON CONFLICT (stream, schema_version) DO UPDATE SET revision = excluded.revision, state = excluded.state, created = now()
WHERE snapshots.revision < excluded.revision`;

// One notification per transaction, whatever it wrote: a subscriber reads from its position anyway.
export const NOTIFY_EVENTS_SQL = `SELECT pg_notify('${EVENTS_CHANNEL}', '')`;

// The streams of $1 some reader recorded as quarantined (jl_quarantined, by its primary key). A
// flush that expires leases asks: a stream it reads fine while its row is still there has just
// come out of its quarantine (the sweeper's re-check, which ends it, has not run yet), and its
// leases get their grace from now (ExpireLeases streamGrace).
export const QUARANTINED_SQL = `SELECT DISTINCT stream FROM jl_quarantined WHERE stream = ANY($1::text[])`;

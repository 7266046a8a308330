import { randomUUID } from 'node:crypto';
import type { JsonObject } from '../../../domain/ports/event-store.js';
import type { DecidedAppend } from '../../../domain/ports/ledger-store.js';
import { JOB_STREAM_PREFIX } from '../../../domain/streams.js';
import { upcasters } from '../../../domain/upcasters.js';
import { MAX_ROW_EVENTS, rowColumns, rowsFrom, type RowEvents } from '../../../projections/ledger-rows.js';
import { EVENTS_CHANNEL } from './event-rows.js';

// The statements of a write transaction (./write-transaction.ts) on the event store's tables
// (migration 16): lock and catch up, append, check what was only read, save snapshots, notify.
// A key stream (and any stream but a job's own) has a `streams` row, locked FOR UPDATE and
// moved on by each append; a job's own stream (`job:<id>`) has none: its writers take an
// advisory lock on it, and its revision is its last row's.

// Generic plans for this transaction's prepared statements: with array parameters PostgreSQL
// would otherwise plan them anew on every execution (custom plans), which cost more than running
// them (measured: about 0.1 ms a statement, half a flush's time on one key). Their generic plans
// find every row by primary key (see read-models.ts), whatever the batch.
export const BEGIN_SQL = `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL plan_cache_mode = force_generic_plan`;
// On a distributed ledger (Citus) custom plans, always: Citus plans a statement on the streams of
// one shard only when it sees their values, and refuses a generic plan of `stream = ANY($1)`.
export const BEGIN_DISTRIBUTED_SQL = `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL plan_cache_mode = force_custom_plan`;
/** The transaction's id, on the coordinator (a statement that reads no distributed table runs there). */
export const XID_SQL = `SELECT pg_current_xact_id()::text AS xid`;

/** Whether a stream is a job's own: no streams row, an advisory lock. */
export const isJobStream = (stream: string): boolean => stream.startsWith(JOB);
const JOB = JOB_STREAM_PREFIX;

// Deadlock freedom: every transaction that locks streams (a flush's lock or lockFirst, archive)
// takes ALL the advisory locks of its job streams first, in the order of their keys, and only
// then the row locks of its other streams, in name order ("C" collation): two transactions that
// share streams queue up in one order instead of deadlocking. The keys are sorted, not the names:
// two names may share a key (the keys share their 64-bit space with the leadership locks, named
// 'jobledger:…'; a clash is a 2^-64 chance). ADVISORY_SQL MUST stay a statement of its own before
// the reads (LOCK_SQL): a statement reads in the snapshot it started with, and only one that
// starts once the lock is held sees what the stream's previous writer committed. Guarded by
// test/adapters/postgres/job-streams.int.test.ts ("issue 22: … no deadlock …", "exactly one wins").
export const ADVISORY_SQL = `
SELECT pg_advisory_xact_lock(k) FROM (SELECT DISTINCT hashtextextended(s, 0) AS k FROM unnest($1::text[]) AS s ORDER BY k OFFSET 0) keys`;

/** The row locks of streams that have a streams row ($1, sorted), reading nothing: the second half of a lock. */
export const LOCK_ROWS_SQL = `SELECT stream FROM streams WHERE stream = ANY($1::text[]) ORDER BY stream FOR UPDATE`;

/**
 * A job stream's last row, live, else archived (all of its rows moved): its revision and last
 * writer. Only where `when` holds (a one-time filter: other streams never touch appends for it).
 */
const jobHead = (stream: string, when: string, on = ''): string => `
  SELECT h.last_revision, h.transaction_id FROM (
    (SELECT a.last_revision, a.transaction_id FROM appends a WHERE ${when} AND a.stream = ${stream}${onShard('a', on)} ORDER BY a.revision DESC LIMIT 1)
    UNION ALL
    (SELECT a.last_revision, a.transaction_id FROM appends_archive a WHERE ${when} AND a.stream = ${stream}${onShard('a', on)} ORDER BY a.revision DESC LIMIT 1)
    LIMIT 1) h`;

/**
 * On a distributed ledger (Citus), a statement is planned as one shard's only when every table it
 * reads says which streams it reads, by a value: ` AND alias.stream = ANY(on)`, `on` the SQL of
 * the group's streams (all of one shard: ./shard-map.ts). Empty on one PostgreSQL: the text of
 * each statement there is what it was.
 */
const onShard = (alias: string, on: string): string => (on === '' ? '' : ` AND ${alias}.stream = ANY(${on})`);

/**
 * The rows of a stream holding revisions after `after`, live and archived, in order. The archive
 * is read only where it may hold some (a one-time filter the planner checks before touching it):
 * a key stream whose newest archived revision (streams.archived_revision) is past `after`; a job
 * stream whose live rows start after it (a job stream's archived rows are always its first ones:
 * --exact moves them all at once, and by week archive moves weeks in order and moves a row it
 * leaves live on to the first week it leaves, never past the stream's later rows). Only where `when` holds (another one-time filter): a
 * flush on a stream its writer holds reads no row at all, and never the archive.
 */
const rowsAfter = (s: { stream: string; after: string; archived: string; job: string; when: string; on?: string }): string => `
  SELECT ${rowColumns('r')} FROM appends r WHERE ${s.when}${onShard('r', s.on ?? '')} AND ${rowsFrom('appends', 'r', s.stream, `${s.after} + 1`, s.on)}
  UNION ALL
  SELECT ${rowColumns('r')} FROM appends_archive r
  WHERE ${s.when}${onShard('r', s.on ?? '')} AND (CASE WHEN ${s.job} THEN NOT EXISTS (SELECT FROM appends x WHERE x.stream = ${s.stream}${onShard('x', s.on ?? '')} AND x.revision <= ${s.after} + 1) ELSE ${s.archived} > ${s.after} END)
    AND ${rowsFrom('appends_archive', 'r', s.stream, `${s.after} + 1`, s.on)}
  ORDER BY revision`;

/** A row of LOCK_SQL: a locked stream, and one of its rows (the columns of a LedgerRow: ../../../projections/ledger-rows.ts), all NULL when none came. */
export interface LockRow {
  locked: string;
  head: string;
  writer: string;
  xid: string;
  snapshot_revision: string | null;
  position: string | null;
}

// The streams to lock and read ($1, sorted), with what the caller lacks ($2: the revision its
// state is at, -1 none, NULL: lock only); $3: the snapshots' schema version. Locks the streams
// rows (name order; LockRows sits above the sort, so rows are locked in that order), after the
// job streams' advisory locks (ADVISORY_SQL, the statement before). Each stream that exists comes
// with its revision, its last writer (the caller defers a stream a younger transaction wrote
// last: streams.transaction_id, or a job stream's last row's), the revision of a newer snapshot,
// and its rows after the snapshot or after $2. A streams row's revision is the locked one, but
// its rows are read in the statement's snapshot, which predates any row lock it waited for:
// lock() reads such a stream again (SNAPSHOTS_SQL, DELTAS_SQL). A job stream's advisory lock was
// taken by the statement before, so its rows are current. A stream this process wrote last costs
// one probe of its rows.
const lockSql = (on: string): string => `
WITH w AS (SELECT * FROM unnest($1::text[], $2::bigint[]) AS w (stream, after)),
locked AS MATERIALIZED (
  SELECT stream, revision, transaction_id, archived_revision FROM streams WHERE stream = ANY($1::text[]) ORDER BY stream FOR UPDATE
),
heads AS MATERIALIZED (
  SELECT w.stream, w.after, coalesce(l.revision, j.last_revision) AS revision, coalesce(l.transaction_id, j.transaction_id) AS writer,
         l.archived_revision, l.stream IS NULL AS job
  FROM w LEFT JOIN locked l ON l.stream = w.stream
  LEFT JOIN LATERAL (${jobHead('w.stream', `starts_with(w.stream, '${JOB}')`, on)}) j ON true
  WHERE l.stream IS NOT NULL OR j.last_revision IS NOT NULL
)
SELECT h.stream AS locked, h.revision::text AS head, h.writer::text AS writer, ${on === '' ? 'pg_current_xact_id()::text' : 'NULL::text'} AS xid, s.revision::text AS snapshot_revision, e.*
FROM heads h
LEFT JOIN snapshots s ON s.stream = h.stream AND s.schema_version = $3 AND s.revision > h.after${onShard('s', on)}
LEFT JOIN LATERAL (${rowsAfter({ stream: 'h.stream', after: 'greatest(h.after, coalesce(s.revision, -1))', archived: 'h.archived_revision', job: 'h.job', when: 'h.revision > h.after', on })}) e ON true
ORDER BY h.stream, e.revision`;
export const LOCK_SQL = lockSql('');
/** LOCK_SQL of one shard's streams ($1, sorted) on a distributed ledger; its `xid` is NULL: the transaction's id is the coordinator's (XID_SQL). */
export const LOCK_ON_SHARD_SQL = lockSql('$1::text[]');

// Snapshots newer than the caller's state ($1 streams, $2 revision each is at, -1: none; $3
// schema version), for streams LOCK_SQL could not bring up to date. Run once the streams are
// held: nobody else can save a snapshot of a locked stream (saves happen under the lock).
const snapshotsSql = (on: string): string => `
SELECT s.stream, s.revision::text AS revision, s.state
FROM unnest($1::text[], $2::bigint[]) AS w (stream, after)
JOIN snapshots s ON s.stream = w.stream AND s.schema_version = $3 AND s.revision > w.after${onShard('s', on)}`;
export const SNAPSHOTS_SQL = snapshotsSql('');
export const SNAPSHOTS_ON_SHARD_SQL = snapshotsSql('$1::text[]');

// Every row after the caller's state (or after the newer snapshot SNAPSHOTS_SQL returns).
const deltasSql = (on: string): string => `
SELECT e.* FROM unnest($1::text[], $2::bigint[]) AS w (stream, after)
LEFT JOIN streams st ON st.stream = w.stream${onShard('st', on)}
CROSS JOIN LATERAL (SELECT greatest(w.after, coalesce((SELECT s.revision FROM snapshots s WHERE s.stream = w.stream AND s.schema_version = $3 AND s.revision > w.after${onShard('s', on)}), -1)) AS after) f
CROSS JOIN LATERAL (${rowsAfter({ stream: 'w.stream', after: 'f.after', archived: 'st.archived_revision', job: 'st.stream IS NULL', when: 'true', on })}) e
ORDER BY e.stream, e.revision`;
export const DELTAS_SQL = deltasSql('');
export const DELTAS_ON_SHARD_SQL = deltasSql('$1::text[]');

/**
 * The appends of a commit as WRITE_SQL takes them (each one row; the events' ids made up where
 * none was given, their metadata stamped with their schema), and the ids that must be unique.
 * `each` is told of every event, with its revision and the metadata stored.
 */
export const wireAppends = (
  appends: readonly DecidedAppend[],
  each: (append: DecidedAppend, index: number, revision: number, metadata: JsonObject) => void,
): { wire: WireAppend[]; uniques: string[] } => {
  const wire: WireAppend[] = [];
  const uniques: string[] = [];
  for (const append of appends) {
    const { expected, events } = append;
    if (typeof expected !== 'number' && expected !== 'no_stream') throw new TypeError(`append to ${append.stream}: a flush appends at an exact revision`);
    if (events.length > MAX_ROW_EVENTS) throw new RangeError(`append to ${append.stream}: ${events.length} events, more than one row holds (${MAX_ROW_EVENTS}): append them in parts`);
    const base = expected === 'no_stream' ? -1 : expected;
    const metadatas = events.map((e, i) => {
      const metadata = upcasters.stamp(e.type, e.metadata ?? {});
      each(append, i, base + 1 + i, metadata);
      return metadata;
    });
    const first = metadatas[0]!;
    const shared = JSON.stringify(first);
    wire.push({
      stream: append.stream,
      expected: base,
      types: events.map((e) => e.type),
      ids: events.map((e) => {
        const eventId = e.eventId ?? randomUUID();
        if (e.unique === true) uniques.push(eventId);
        return eventId;
      }),
      data: events.map((e) => e.data),
      metadata: first,
      metadatas: metadatas.every((m) => m === first || JSON.stringify(m) === shared) ? null : metadatas,
    });
  }
  return { wire, uniques };
};

/** An append as WRITE_SQL takes it ($1: one JSON array of these, a flush appending at most once per stream). */
export interface WireAppend extends RowEvents {
  readonly stream: string;
  /** The revision it expects the stream at, -1: none. */
  readonly expected: number;
}

// The appends of a flush. $1: one row per stream, its events and the revision it expects; $2: the
// streams with a streams row, for the planner (see read-models.ts: found by primary key however
// many streams there are); $3: the event ids that must be unique. This MUST stay one statement:
// the expected-revision check and the writes are one step, and it is the check, not the lock
// taken before, that keeps every limit. A stream that did not move as expected gets no claimed
// row, so its row gets a NULL revision and the NOT NULL constraint fails the whole statement (and
// transaction) instead of writing around a conflict (StaleStateError):
// - a streams row that moved (another revision, or a last writer younger than this transaction:
//   see streams.transaction_id); a key stream created meanwhile fails on streams_pkey;
// - a job stream whose last row, in this statement's snapshot (which starts once its advisory
//   lock is held), is not at the expected revision or was written by a younger transaction. A
//   job stream created here (expected -1) is not locked (see PgWriteTransaction.commit): two
//   creators both pass the check, and the second fails on appends_pkey at revision 0 (its
//   archived rows, if any, are seen by the check: archive moves them in one statement).
// An id that is already recorded fails on unique_event_ids_pkey (DuplicateEventIdError). Guarded
// by test/adapters/postgres/job-streams.int.test.ts ("issue 22: …") and test/commands/given-ids.int.test.ts.
const WRITE_SQL = `
WITH r AS MATERIALIZED (
  SELECT * FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (stream text, expected bigint, types text[], ids uuid[], data jsonb, metadata jsonb, metadatas jsonb))
    WITH ORDINALITY AS r (stream, expected, types, ids, data, metadata, metadatas, ord)
),
moved AS (
  UPDATE streams t SET revision = r.expected + cardinality(r.types), transaction_id = pg_current_xact_id()
  FROM r WHERE t.stream = ANY ($2::text[]) AND t.stream = r.stream AND r.expected >= 0 AND t.revision = r.expected AND t.transaction_id <= pg_current_xact_id()
  RETURNING t.stream
),
created AS (
  INSERT INTO streams (stream, revision)
  SELECT stream, expected + cardinality(types) FROM r WHERE r.expected < 0 AND NOT starts_with(r.stream, '${JOB}') ORDER BY stream
  RETURNING stream
),
jobs AS (
  SELECT r.stream FROM r
  LEFT JOIN LATERAL (${jobHead('r.stream', `starts_with(r.stream, '${JOB}')`)}) h ON true
  WHERE starts_with(r.stream, '${JOB}') AND coalesce(h.last_revision, -1) = r.expected AND coalesce(h.transaction_id <= pg_current_xact_id(), true)
),
claimed AS (SELECT stream FROM moved UNION ALL SELECT stream FROM created UNION ALL SELECT stream FROM jobs),
written AS (
  INSERT INTO appends (stream, revision, types, ids, data, metadata, metadatas)
  SELECT r.stream, CASE WHEN c.stream IS NOT NULL THEN r.expected + 1 END, r.types, r.ids, r.data, r.metadata, r.metadatas
  FROM r LEFT JOIN claimed c ON c.stream = r.stream
  ORDER BY r.ord
  RETURNING stream, revision, position
),
uniques AS (
  INSERT INTO unique_event_ids (event_id) SELECT unnest($3::uuid[])
)`;
/** Where each written row sits: for append(), which reports positions; a flush needs none. */
export const WRITE_RETURNING_SQL = `${WRITE_SQL}
SELECT stream, revision::text AS revision, position::text AS position, pg_current_xact_id()::text AS xid FROM written`;
export const WRITE_FLUSH_SQL = `${WRITE_SQL}
SELECT count(*) FROM written`;

// The appends of a flush on a distributed ledger (Citus), as statements Citus plans: WRITE_SQL's
// data-modifying CTEs read a stream's rows through LATERAL joins of the JSON's rows, which Citus
// does not plan across shards. The check stays what keeps every limit, each part in a statement
// that fails the transaction when a stream moved (StaleStateError), before any row is written:
// - MOVE_STREAMS: each key stream that exists moves on from the revision expected, by the last
//   writer's id no younger than this transaction's; one that moved gets a NULL revision (the
//   NOT NULL constraint fails the statement), one missing fails jl_expect_rows. Its row lock,
//   taken here if the lock before did not take it, is held to COMMIT: nobody moves the stream
//   between this check and the rows written after it;
// - JOB_HEADS_ON_SHARD: each job stream's last row (live, else archived) is at the revision
//   expected, by a writer no younger (jl_reads_moved raises otherwise); its writers serialise on
//   the advisory lock taken before (on the coordinator, where every writer takes it);
// - CREATE_STREAMS: a key stream created here; one created meanwhile fails on streams_pkey;
// - APPEND_ROWS: the rows, at the revisions checked (a second creator of a job stream fails on
//   appends_pkey). Guarded by test/citus/ledger.citus.test.ts and the e2e test there.
// The transaction's id is the coordinator's ($n::xid8, XID_SQL): a statement Citus runs on a
// worker would read the worker's own from pg_current_xact_id(). Every id the ledger keeps is the
// coordinator's, so that (transaction_id, position) stays one order.
export const MOVE_STREAMS_SQL = `
WITH moved AS (
  UPDATE streams t SET revision = CASE WHEN t.revision = r.expected AND t.transaction_id <= $3::xid8 THEN r.expected + cardinality(r.types) END, transaction_id = $3::xid8
  FROM jsonb_to_recordset($1::jsonb) AS r (stream text, expected bigint, types text[])
  WHERE t.stream = ANY($2::text[]) AND t.stream = r.stream AND r.expected >= 0
  RETURNING t.stream
)
SELECT jl_expect_rows(count(*), cardinality($2::text[]), 'streams moved on') FROM moved`;

/** $1 one shard's job streams, $2 the revision each is expected at (-1: none), $3 this transaction's id. */
export const JOB_HEADS_ON_SHARD_SQL = `
SELECT jl_reads_moved(string_agg(c.stream, ', ' ORDER BY c.stream))
FROM unnest($1::text[], $2::bigint[]) AS c (stream, revision)
LEFT JOIN LATERAL (${jobHead('c.stream', 'true', '$1::text[]')}) j ON true
WHERE coalesce(j.last_revision, -1) <> c.revision OR coalesce(j.transaction_id > $3::xid8, false)`;

export const CREATE_STREAMS_SQL = `
INSERT INTO streams (stream, revision, transaction_id)
SELECT r.stream, r.expected + cardinality(r.types), $2::xid8 FROM jsonb_to_recordset($1::jsonb) AS r (stream text, expected bigint, types text[])
WHERE r.expected < 0 AND NOT starts_with(r.stream, '${JOB}')
ORDER BY r.stream`;

const appendRows = (returning: string): string => `
INSERT INTO appends (stream, revision, types, ids, data, metadata, metadatas, transaction_id)
SELECT r.stream, r.expected + 1, r.types, r.ids, r.data, r.metadata, r.metadatas, $2::xid8
FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (stream text, expected bigint, types text[], ids uuid[], data jsonb, metadata jsonb, metadatas jsonb))
  WITH ORDINALITY AS r (stream, expected, types, ids, data, metadata, metadatas, ord)
ORDER BY r.ord${returning}`;
export const APPEND_ROWS_SQL = appendRows('');
/** APPEND_ROWS_SQL, saying where each row sits (append(), which reports positions). */
export const APPEND_ROWS_RETURNING_SQL = appendRows(`
RETURNING stream, revision::text AS revision, position::text AS position, $2::xid8::text AS xid`);

export const UNIQUE_IDS_SQL = `INSERT INTO unique_event_ids (event_id) SELECT unnest($1::uuid[])`;

// The streams the flush's decisions only read, each at the revision decided on (-1: absent), checked
// before anything is written (jl_check_read, migrations 0013 and 0016; it raises, failing the
// transaction). Streams that exist were locked by this transaction (LOCK_SQL), so none can move
// between this check and COMMIT; one that did not exist may be created meanwhile by a
// transaction that read nothing of this one's, which is then ordered after it.
export const READ_CHECK_SQL = `SELECT jl_check_read($1::text[], $2::bigint[])`;

// READ_CHECK_SQL on a distributed ledger, for one shard's streams: the same check, in a statement
// Citus plans on that shard (jl_check_read's own statement reads streams and appends from the
// coordinator, through a correlated subquery Citus does not plan); jl_reads_moved (migration 21)
// raises jl_check_read's error for the streams that moved.
export const READ_CHECK_ON_SHARD_SQL = `
SELECT jl_reads_moved(string_agg(c.stream, ', ' ORDER BY c.stream))
FROM unnest($1::text[], $2::bigint[]) AS c (stream, revision)
LEFT JOIN streams s ON s.stream = c.stream${onShard('s', '$1::text[]')}
LEFT JOIN LATERAL (${jobHead('c.stream', `starts_with(c.stream, '${JOB}')`, '$1::text[]')}) j ON true
WHERE coalesce(s.revision, j.last_revision, -1) <> c.revision`;

// $1 streams, $2 schema versions, $3 revisions, $4 states (JSON text: stored as it comes, migration 20).
export const SAVE_SNAPSHOTS_SQL = `
INSERT INTO snapshots (stream, schema_version, revision, state)
SELECT stream, schema_version, revision, state FROM unnest($1::text[], $2::int[], $3::bigint[], $4::text[]) AS x (stream, schema_version, revision, state)
ON CONFLICT (stream, schema_version) DO UPDATE SET revision = excluded.revision, state = excluded.state, created = now()
WHERE snapshots.revision < excluded.revision`;

// The snapshots just saved ($1 streams, $2 revisions, $4 schema versions) that are also to be kept
// as past states (snapshots_kept, migration 20), each unless the stream's newest kept state is
// fewer than $3 revisions before it. decided_until carries the latest decision time of every event
// so far: the previous kept state's, and the events since it (read once, here, every
// snapshotsKeptEvery events; the whole stream for its first kept state). Runs after
// SAVE_SNAPSHOTS_SQL in the same transaction, whose rows it reads (the state is sent once).
const saveKeptSql = (on: string): string => `
WITH due AS MATERIALIZED (
  SELECT w.stream, w.revision, w.schema_version, coalesce(p.revision, -1) AS after, p.decided_until
  FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::int[]) AS w (stream, revision, spacing, schema_version)
  LEFT JOIN LATERAL (
    SELECT k.revision, k.decided_until FROM snapshots_kept k WHERE k.stream = w.stream AND k.schema_version = w.schema_version${onShard('k', on)} ORDER BY k.revision DESC LIMIT 1
  ) p ON true
  WHERE p.revision IS NULL OR w.revision - p.revision >= w.spacing
)
INSERT INTO snapshots_kept (stream, schema_version, revision, decided_until, last_at, state)
SELECT d.stream, d.schema_version, d.revision, greatest(d.decided_until, t.decided_until), t.last_at, s.state
FROM due d
JOIN snapshots s ON s.stream = d.stream AND s.schema_version = d.schema_version AND s.revision = d.revision${onShard('s', on)}
CROSS JOIN LATERAL (
  SELECT max((e.data->>'at')::bigint) AS decided_until, max((e.data->>'at')::bigint) FILTER (WHERE a.revision + e.i - 1 = d.revision) AS last_at
  FROM ledger_appends a CROSS JOIN LATERAL jsonb_array_elements(a.data) WITH ORDINALITY AS e (data, i)
  WHERE a.stream = d.stream${onShard('a', on)} AND a.last_revision > d.after AND a.revision <= d.revision AND a.revision + e.i - 1 BETWEEN d.after + 1 AND d.revision
) t
ON CONFLICT DO NOTHING`;
export const SAVE_KEPT_SNAPSHOTS_SQL = saveKeptSql('');
export const SAVE_KEPT_SNAPSHOTS_ON_SHARD_SQL = saveKeptSql('$1::text[]');

// One notification per transaction, whatever it wrote: a subscriber reads from its position anyway.
export const NOTIFY_EVENTS_SQL = `SELECT pg_notify('${EVENTS_CHANNEL}', '')`;

// The streams of $1 some reader recorded as quarantined (jl_quarantined, by its primary key). A
// flush that expires leases asks: a stream it reads fine while its row is still there has just
// come out of its quarantine (the sweeper's re-check, which ends it, has not run yet), and its
// leases get their grace from now (ExpireLeases streamGrace).
export const QUARANTINED_SQL = `SELECT DISTINCT stream FROM jl_quarantined WHERE stream = ANY($1::text[])`;

import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { KeyEvent } from '../../../domain/events.js';
import {
  DuplicateEventIdError,
  type GlobalPosition,
  type JsonObject,
  type RecordedEvent,
  type Snapshot,
  type StreamRevision,
} from '../../../domain/ports/event-store.js';
import {
  CommitOutcomeUnknownError,
  StaleStateError,
  TransientWriteError,
  type Commit,
  type Committed,
  type HandedOffJob,
  type LockRequest,
  type LockedStream,
  type MessageRead,
  type ReceivedMessage,
  type WriteTransaction,
} from '../../../domain/ports/ledger-store.js';
import { decodeRecorded } from '../../../domain/recorded.js';
import { upcasters } from '../../../domain/upcasters.js';
import type { ProjectedEvent, Projection, Statement } from '../../../projections/projection.js';
import { keyOfStream } from '../../../projections/projection.js';
import { WRITER, quarantineOf, recordQuarantines, type Quarantine } from '../../../projections/quarantine.js';
import { projectAll, statementName } from '../../../projections/apply.js';
import { isConnectionError } from '../../postgres/outage.js';
import { dispatchQueue, readStatement } from '../../queue/pg-queue.js';
import { EVENT_COLUMNS, EVENTS_CHANNEL, toRecordedEvent, type EventRow } from './event-rows.js';

// One transaction of the key writer (src/commands/key-writer.ts), on one pipelining connection,
// in three round trips at most:
//   read    BEGIN; the dispatch queue reads (their messages name streams to lock)
//   lock    [BEGIN;] LOCK_SQL (and, for a stream it waited for, SNAPSHOTS_SQL; DELTAS_SQL)
//   commit  WRITE_*_SQL; the inline projections' statements; archives, snapshots, NOTIFY; COMMIT
// Every statement of a round trip goes out at once; none of a later one is sent before the
// earlier one's results are in, since the writer decides on them. A statement that fails aborts
// the transaction, so everything after it is refused and COMMIT answers ROLLBACK: nothing of the
// flush is written (commit() then throws the first error).

export interface WriteTransactionOptions {
  /** Applied to every appended event of the streams they handle, in the transaction (inline mode). */
  readonly inline: readonly Projection[];
  /** NOTIFY EVENTS_CHANNEL once per commit (only where someone subscribes: async runners). */
  readonly notifyEvents: boolean;
  readonly schemaVersion: number;
}

const NO_STREAM = -1;
const revisionOf = (r: StreamRevision | 'no_stream' | undefined): number => (r === undefined || r === 'no_stream' ? NO_STREAM : r);

export class PgWriteTransaction implements WriteTransaction {
  private began = false;
  private ended = false;
  private broken = false;
  /** This transaction's id, known once it locked. */
  private xid: bigint | undefined;

  constructor(
    private readonly client: pg.PoolClient,
    private readonly options: WriteTransactionOptions,
  ) {
    // A connection lost while the transaction holds it: pg emits 'error' on the client, which
    // nobody else listens to while it is checked out (an unheard 'error' would end the process).
    // The query in flight fails too; the client is thrown away on release.
    client.on('error', this.lost);
  }

  private readonly lost = (): void => {
    this.broken = true;
  };

  private release(): void {
    this.client.off('error', this.lost);
    this.client.release(this.broken);
  }

  async read(reads: readonly MessageRead[]): Promise<readonly (readonly ReceivedMessage[])[]> {
    const results = await this.run(reads.map((r) => readStatement(r.queue, r.vtMs, r.qty)));
    return results.map((r) => r.rows.map((row: { msg_id: string; read_ct: number; message: unknown }) => ({ msgId: row.msg_id, readCt: row.read_ct, message: row.message })));
  }

  async lock(requests: readonly LockRequest[]): Promise<ReadonlyMap<string, LockedStream>> {
    const after = new Map<string, number | null>();
    for (const r of requests) after.set(r.stream, r.after === undefined ? null : revisionOf(r.after));
    const streams = [...after.keys()].sort(byName);
    const [locked] = await this.run([{ text: LOCK_SQL, values: [streams, streams.map((s) => after.get(s)), this.options.schemaVersion] }]);
    const found = new Map<string, { revision: number; writer: bigint; snapshot: number | null; events: RecordedEvent[] }>();
    for (const row of locked!.rows as LockRow[]) {
      this.xid ??= BigInt(row.xid);
      let f = found.get(row.stream);
      if (f === undefined) {
        f = { revision: Number(row.revision), writer: BigInt(row.writer), snapshot: row.snapshot_revision === null ? null : Number(row.snapshot_revision), events: [] };
        found.set(row.stream, f);
      }
      if (row.stream_revision !== null) f.events.push(toRecordedEvent(row as unknown as EventRow));
    }
    // LOCK_SQL read the events in the snapshot it started with: a stream it had to wait for (its
    // writer committed meanwhile) comes back short of its locked revision, and so does one with
    // a newer snapshot (whose state it does not carry). Those are read again, now that they are held.
    const again = streams.filter((s) => {
      const f = found.get(s);
      const from = after.get(s);
      if (f === undefined || from === null) return false;
      const last = f.events.at(-1)?.revision ?? (f.snapshot ?? from);
      return f.snapshot !== null || last !== f.revision;
    });
    const snaps = new Map<string, Snapshot>();
    if (again.length > 0) {
      const wanted = [again, again.map((s) => after.get(s)), this.options.schemaVersion];
      const [snapshots, deltas] = await this.run([
        { text: SNAPSHOTS_SQL, values: wanted },
        { text: DELTAS_SQL, values: wanted },
      ]);
      for (const r of snapshots!.rows as { stream: string; revision: string; state: JsonObject }[]) {
        snaps.set(r.stream, { stream: r.stream, revision: Number(r.revision), schemaVersion: this.options.schemaVersion, state: r.state });
      }
      for (const stream of again) found.get(stream)!.events = [];
      for (const row of deltas!.rows as EventRow[]) found.get(row.stream)!.events.push(toRecordedEvent(row));
    }
    const out = new Map<string, LockedStream>();
    for (const stream of streams) {
      const f = found.get(stream);
      out.set(stream, {
        stream,
        revision: f === undefined ? 'no_stream' : f.revision,
        snapshot: snaps.get(stream),
        events: f?.events ?? [],
        // See streams.transaction_id: a younger last writer means our events would sort first.
        deferred: f !== undefined && this.xid !== undefined && f.writer > this.xid,
      });
    }
    return out;
  }

  async commit(commit: Commit): Promise<Committed> {
    const statements: Statement[] = [];
    if (commit.lockFirst?.length) {
      const streams = [...new Set(commit.lockFirst)].sort(byName);
      statements.push({ text: LOCK_SQL, values: [streams, streams.map(() => null), this.options.schemaVersion] });
    }
    if (commit.readChecks?.length) {
      const checks = [...commit.readChecks].sort((a, b) => byName(a.stream, b.stream));
      statements.push({ text: READ_CHECK_SQL, values: [checks.map((c) => c.stream), checks.map((c) => revisionOf(c.revision))] });
    }
    const written = statements.length;
    const projected: ProjectedEvent[] = [];
    const wire: WireEvent[] = [];
    const heads: { stream: string; expected: number; revision: number }[] = [];
    for (const append of commit.appends) {
      const expected = append.expected;
      if (typeof expected !== 'number' && expected !== 'no_stream') throw new TypeError(`append to ${append.stream}: a flush appends at an exact revision`);
      const base = revisionOf(expected);
      heads.push({ stream: append.stream, expected: base, revision: base + append.events.length });
      const key = keyOfStream(append.stream);
      const handled = this.options.inline.some((p) => p.handles(append.stream));
      append.events.forEach((e, i) => {
        const revision = base + 1 + i;
        const eventId = e.eventId ?? randomUUID();
        const metadata = upcasters.stamp(e.type, e.metadata ?? {});
        wire.push({ stream: append.stream, revision, type: e.type, data: e.data, metadata, event_id: eventId });
        if (!handled) return;
        const event = append.decided?.[i] ?? decodeRecorded({ stream: append.stream, revision, type: e.type, data: e.data, metadata });
        projected.push({ event: event as KeyEvent, stream: append.stream, revision, key, commit: this.xid ?? 0n });
      });
    }
    if (heads.length > 0) statements.push({ text: commit.positions === true ? WRITE_RETURNING_SQL : WRITE_FLUSH_SQL, values: [JSON.stringify(heads), JSON.stringify(wire), heads.map((h) => h.stream)] });
    statements.push(...projectAll(this.options.inline, projected));
    if (commit.archive?.length) statements.push(dispatchQueue.archive(commit.archive));
    if (commit.release?.length) statements.push(dispatchQueue.setVisibility(commit.release.map((msgId) => ({ msgId, ms: 0 }))));
    const delay = commit.delay;
    if (delay !== undefined && delay.msgIds.length > 0) statements.push(dispatchQueue.setVisibility(delay.msgIds.map((msgId) => ({ msgId, ms: delay.ms }))));
    const quarantined = (commit.quarantine ?? []).map(quarantineOf).filter((q): q is Quarantine => q !== undefined);
    if (quarantined.length > 0) statements.push(recordQuarantines(WRITER, quarantined));
    if (commit.snapshots?.length) {
      statements.push({
        text: SAVE_SNAPSHOTS_SQL,
        values: [JSON.stringify(commit.snapshots.map((s) => ({ stream: s.stream, schema_version: s.schemaVersion, revision: s.revision, state: s.state })))],
      });
    }
    if (this.options.notifyEvents && heads.length > 0) statements.push({ text: NOTIFY_EVENTS_SQL, values: [] });
    statements.push({ text: 'COMMIT', values: [] });
    const results = await this.run(statements, { ending: true });
    if (results.at(-1)!.command !== 'COMMIT') throw new TransientWriteError('COMMIT rolled back');
    const handedOff = new Map<string, HandedOffJob>();
    const positions = new Map<string, GlobalPosition>();
    statements.forEach((s, i) => {
      if (s.returns === 'handedOff') for (const job of results[i]!.rows as HandedOffJob[]) handedOff.set(job.jobId, job);
    });
    if (heads.length > 0 && commit.positions === true) {
      for (const row of results[written]!.rows as { stream: string; revision: string; position: string; xid: string }[]) {
        positions.set(`${row.stream}\u0000${row.revision}`, { commit: BigInt(row.xid), prepare: BigInt(row.position) });
      }
    }
    return { handedOff, positionOf: (stream, revision) => positions.get(`${stream}\u0000${revision}`) };
  }

  async rollback(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    if (this.began && !this.broken) await this.client.query('ROLLBACK').catch(() => (this.broken = true));
    this.release();
  }

  /**
   * Sends the statements at once (BEGIN first if the transaction has not begun) and waits for all
   * of them; throws the first error. `ending`: the last one ends the transaction (COMMIT), so the
   * connection goes back to the pool whatever happens.
   */
  private async run(statements: readonly Statement[], { ending = false } = {}): Promise<pg.QueryResult[]> {
    if (this.ended) throw new Error('write transaction already ended');
    const query = (s: Statement): Promise<pg.QueryResult> =>
      s.values.length === 0 ? this.client.query(s.text) : this.client.query({ name: statementName(s.text), text: s.text, values: s.values as unknown[] });
    const all: Statement[] = this.began ? [...statements] : [{ text: BEGIN_SQL, values: [] }, ...statements];
    this.began = true;
    const settled = (this.client as { pipeline?: boolean }).pipeline === true ? await this.pipelined(all, query) : await this.oneByOne(all, query, ending);
    if (ending) {
      this.ended = true;
      // A COMMIT that never answered leaves the transaction's fate unknown and the connection unusable.
      if (settled.some((r) => r.status === 'rejected' && !isPgError(r.reason))) this.broken = true;
      this.release();
    }
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected' && !isAbortedTransaction(r.reason)) ??
      settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    // No statement was refused, yet an answer is missing: the COMMIT may have landed or not.
    if (failed && ending && !settled.some((r) => r.status === 'rejected' && isPgError(r.reason))) throw new CommitOutcomeUnknownError(String((failed.reason as Error)?.message ?? failed.reason));
    if (failed) throw mapError(named(failed.reason, all[settled.indexOf(failed)]));
    return settled.slice(all.length - statements.length).map((r) => (r as PromiseFulfilledResult<pg.QueryResult>).value);
  }

  /** All at once: a pipelining client writes each statement as it is queued; corked, they leave in one write. */
  private async pipelined(all: readonly Statement[], query: (s: Statement) => Promise<pg.QueryResult>): Promise<PromiseSettledResult<pg.QueryResult>[]> {
    const stream = (this.client as unknown as { connection?: { stream?: { cork?(): void; uncork?(): void } } }).connection?.stream;
    const sent: Promise<pg.QueryResult>[] = [];
    stream?.cork?.();
    try {
      for (const s of all) sent.push(query(s));
    } finally {
      stream?.uncork?.();
    }
    return Promise.allSettled(sent);
  }

  /**
   * A client of a pool the caller made without `pipeline`: one statement after the other, up to
   * the first that fails (then, for a commit, a ROLLBACK instead of the rest).
   */
  private async oneByOne(all: readonly Statement[], query: (s: Statement) => Promise<pg.QueryResult>, ending: boolean): Promise<PromiseSettledResult<pg.QueryResult>[]> {
    const settled: PromiseSettledResult<pg.QueryResult>[] = [];
    for (const s of all) {
      try {
        settled.push({ status: 'fulfilled', value: await query(s) });
      } catch (reason) {
        settled.push({ status: 'rejected', reason });
        if (ending && isPgError(reason) && s.text !== 'COMMIT') await this.client.query('ROLLBACK').catch(() => (this.broken = true));
        break;
      }
    }
    return settled;
  }
}

interface WireEvent {
  readonly stream: string;
  readonly revision: number;
  readonly type: string;
  readonly data: JsonObject;
  readonly metadata: JsonObject;
  readonly event_id: string;
}

const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

const isPgError = (error: unknown): error is pg.DatabaseError => error instanceof Error && 'code' in error && 'severity' in error;
const isAbortedTransaction = (error: unknown): boolean => isPgError(error) && error.code === '25P02';

/** Labels a statement's error with the statement (its first words), for the log line that reports it. */
const named = (reason: unknown, statement: Statement | undefined): unknown => {
  if (reason instanceof Error && statement !== undefined && !('query' in reason)) Object.assign(reason, { query: statement.text.replace(/\s+/g, ' ').trim().slice(0, 60) });
  return reason;
};

/** What a failed statement means to the writer: run again, a duplicate job id, or the error itself. */
const mapError = (error: unknown): unknown => {
  if (!isPgError(error)) {
    // The connection went away (a restart, a network cut): nothing was committed, or the COMMIT's
    // answer was lost. Either way a new transaction re-reads the streams and decides again.
    return isConnectionError(error) ? new TransientWriteError((error as Error).message, { cause: error }) : error;
  }
  // deadlock_detected, serialization_failure, or a stream another transaction created first;
  // class 57P (the server shutting down or restarting: admin_shutdown, crash_shutdown,
  // cannot_connect_now) and class 08 (connection exceptions) end the session, not the flush.
  if (error.code === '40P01' || error.code === '40001' || (error.code === '23505' && error.constraint === 'streams_pkey')) return new TransientWriteError(error.message);
  if (isConnectionError(error)) return new TransientWriteError(error.message, { cause: error });
  // WRITE_SQL's expected-revision check: a stream that had moved on gets no claimed row.
  if (error.code === '23502' && error.column === 'stream_revision') return new StaleStateError(error.message);
  // READ_CHECK_SQL: a stream a decision only read moved before the commit (DETAIL names them).
  if (error.code === 'JL001') return new StaleStateError(error.message, (error.detail ?? '').split(', ').filter((s) => s !== ''));
  if (error.code === '23505' && error.constraint === 'events_event_id_key') {
    const eventId = /\(event_id\)=\(([0-9a-f-]+)\)/i.exec(error.detail ?? '')?.[1];
    return new DuplicateEventIdError('', error.detail ?? '', eventId);
  }
  return error;
};

// Generic plans for this transaction's prepared statements: with array parameters PostgreSQL
// would otherwise plan them anew on every execution (custom plans), which cost more than running
// them (measured: about 0.1 ms a statement, half a flush's time on one key). Their generic plans
// find every row by primary key (see read-models.ts), whatever the batch.
const BEGIN_SQL = `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL plan_cache_mode = force_generic_plan`;

interface LockRow {
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
const WRITE_FLUSH_SQL = `${WRITE_SQL}
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

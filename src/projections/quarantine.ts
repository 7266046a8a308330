import type { GlobalPosition, StreamRevision } from '../domain/ports/event-store.js';
import { EventDecodeError, decodeRecorded } from '../domain/recorded.js';
import { eventsOfRow, rowColumns, rowsFrom, type LedgerRow } from './ledger-rows.js';
import { statement, type Statement } from './projection.js';
import type { Queryable } from './transaction.js';

// jl_quarantined (migration 0006): the streams a reader stopped at because one of their events
// does not decode. Each reader records the streams it meets in the transaction where it goes on
// without them, and deletes its row once the stream decodes again:
// - the key writer ("writer"): in the flush that refused the key's commands; the sweeper re-reads
//   each such stream every sweep and deletes the row once every event from it on decodes;
// - an async runner ("projection:<name>"): in the batch it held the stream back from; it re-reads
//   the stream every retry, applies what it held back and deletes the row in one transaction.

/** The moment each stream's leases could be renewed again (migration 0014), written before its quarantine row goes. */
const LEASE_GRACE_SQL = `
INSERT INTO jl_lease_grace (stream, since_ms) SELECT stream, $2 FROM unnest($1::text[]) AS stream
ON CONFLICT (stream) DO UPDATE SET since_ms = greatest(jl_lease_grace.since_ms, excluded.since_ms)`;

/** The key writer's reader name. */
export const WRITER = 'writer';

/** An async runner's reader name. */
export const projectionReader = (projection: string): string => `projection:${projection}`;

/** Where a reader stopped on a stream. */
export interface Quarantine {
  readonly stream: string;
  readonly revision: StreamRevision;
  readonly position: GlobalPosition;
  readonly error: string;
}

/** The quarantine an EventDecodeError means (none for an event being appended: it was refused, nothing is recorded). */
export const quarantineOf = (error: EventDecodeError): Quarantine | undefined =>
  error.position === null ? undefined : { stream: error.stream, revision: error.revision, position: error.position, error: error.message };

// last_seen from the row the INSERT would have made (its default, the statement's time): on a
// distributed ledger (Citus) DO UPDATE takes immutable functions only.
const RECORD_SQL = /* sql */ `
INSERT INTO jl_quarantined AS q (stream, reader, revision, position, commit_id, error)
SELECT stream, $2, revision, position, commit_id::xid8, error
FROM jsonb_to_recordset($1::jsonb) AS x (stream text, revision bigint, position bigint, commit_id text, error text)
ON CONFLICT (stream, reader) DO UPDATE SET revision = excluded.revision, position = excluded.position, commit_id = excluded.commit_id,
  error = excluded.error, last_seen = excluded.last_seen`;

/** Records (or refreshes) the reader's quarantines. */
export const recordQuarantines = (reader: string, quarantines: readonly Quarantine[]): Statement =>
  statement(
    RECORD_SQL,
    JSON.stringify(quarantines.map((q) => ({ stream: q.stream, revision: q.revision, position: q.position.prepare.toString(), commit_id: q.position.commit.toString(), error: q.error }))),
    reader,
  );

/** Ends the reader's quarantine of these streams, each only if it is still at the revision given (a newer one stands). */
export const clearQuarantines = (reader: string, cleared: readonly Pick<Quarantine, 'stream' | 'revision'>[]): Statement =>
  statement(
    `DELETE FROM jl_quarantined q USING unnest($1::text[], $2::bigint[]) AS c (stream, revision)
     WHERE q.reader = $3 AND q.stream = c.stream AND q.revision = c.revision`,
    cleared.map((c) => c.stream),
    cleared.map((c) => c.revision),
    reader,
  );

/** The reader's quarantines, by stream. */
export const loadQuarantines = async (db: Queryable, reader: string): Promise<Map<string, Quarantine>> => {
  const { rows } = await db.query<{ stream: string; revision: string; position: string; commit_id: string; error: string }>(
    'SELECT stream, revision, position, commit_id::text AS commit_id, error FROM jl_quarantined WHERE reader = $1',
    [reader],
  );
  return new Map(
    rows.map((r) => [r.stream, { stream: r.stream, revision: Number(r.revision), position: { commit: BigInt(r.commit_id), prepare: BigInt(r.position) }, error: r.error }]),
  );
};

/**
 * The key writer's quarantines read again (the sweeper, each sweep): each stream from where it
 * stopped. One that decodes now is over (its row goes, and its leases get their grace from `now`,
 * jl_lease_grace); one that still does not is recorded where it stops now (last_seen moves on).
 * Returns the streams whose quarantine ended.
 */
// $1 a stream, $2 the revision it is quarantined at: its rows from there, in order.
const RECHECK_SQL = `SELECT ${rowColumns('e')} FROM appends e WHERE ${rowsFrom('appends', 'e', '$1::text', '$2::bigint')} ORDER BY e.revision`;

export const recheckWriterQuarantines = async (db: Queryable, now: number): Promise<string[]> => {
  const held = await loadQuarantines(db, WRITER);
  if (held.size === 0) return [];
  const from = new Map([...held.values()].map((q) => [q.stream, q.revision]));
  // A statement a stream (quarantines are few): on a distributed ledger (Citus) one statement's
  // LATERAL reads of several streams' rows are not planned.
  const rows: LedgerRow[] = [];
  for (const [stream, revision] of from) rows.push(...(await db.query<LedgerRow>(RECHECK_SQL, [stream, revision])).rows);
  const still = new Map<string, Quarantine>();
  for (const r of rows.flatMap((row) => eventsOfRow(row, from.get(row.stream)))) {
    if (still.has(r.stream)) continue;
    try {
      decodeRecorded(r);
    } catch (error) {
      const quarantine = error instanceof EventDecodeError ? quarantineOf(error) : undefined;
      if (quarantine === undefined) throw error;
      still.set(r.stream, quarantine);
    }
  }
  const cleared = [...held.values()].filter((q) => !still.has(q.stream));
  const grace = cleared.length > 0 ? [statement(LEASE_GRACE_SQL, cleared.map((q) => q.stream), now)] : [];
  for (const s of [...(still.size > 0 ? [recordQuarantines(WRITER, [...still.values()])] : []), ...grace, ...(cleared.length > 0 ? [clearQuarantines(WRITER, cleared)] : [])]) {
    await db.query(s.text, s.values as unknown[]);
  }
  return cleared.map((q) => q.stream);
};

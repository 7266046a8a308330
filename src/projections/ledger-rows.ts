import type { GlobalPosition, JsonObject, RecordedEvent } from '../domain/ports/event-store.js';

// The ledger's rows (migration 16: the table appends, appends_archive, the view ledger_appends):
// one per append to one stream, its events in order. What the readers of the ledger share: the
// event store's reads (src/adapters/eventstore/postgres), a rebuild (./rebuild.ts).

/**
 * An event's global position is (its row's transaction_id, its row's position × 2^FACT_BITS + its
 * index in the row): strictly increasing in the order the events were appended, so a reader
 * resumes strictly after any event's position. Hence at most 2^FACT_BITS events a row.
 */
export const FACT_BITS = 20;
export const MAX_ROW_EVENTS = 2 ** FACT_BITS;
const INDEX_MASK = BigInt(MAX_ROW_EVENTS - 1);

/** The position of the event at `index` (from 0) of a row. */
export const eventPrepare = (rowPosition: bigint, index: number): bigint => (rowPosition << BigInt(FACT_BITS)) + BigInt(index);

/** The row a position's prepare part is in (its position), and the event's index in it. */
export const rowOfPrepare = (prepare: bigint): { readonly position: bigint; readonly index: number } => ({
  position: prepare >> BigInt(FACT_BITS),
  index: Number(prepare & INDEX_MASK),
});

// xid8 has no JavaScript type parser: it comes as text. The alias must not be `transaction_id`:
// ORDER BY transaction_id would then sort by the text, and '100000' < '99999'.
/** The columns a LedgerRow is read with, of a table or view aliased `alias`. */
// types and ids come as JSON: a row of 2,000 events parsed as PostgreSQL arrays took node-postgres'
// character-by-character array parser several times as long as JSON.parse takes.
export const rowColumns = (alias: string): string =>
  `${alias}.position, ${alias}.transaction_id::text AS transaction_id_text, ${alias}.stream, ${alias}.revision, to_json(${alias}.types) AS types, to_json(${alias}.ids) AS ids, ${alias}.data, ${alias}.metadata, ${alias}.metadatas, ${alias}.created`;

/** The events of a row, column by column, in order. */
export interface RowEvents {
  readonly types: readonly string[];
  readonly ids: readonly string[];
  readonly data: readonly JsonObject[];
  readonly metadata: JsonObject;
  /** Each event's own metadata, when they differ (null: every event's is `metadata`). */
  readonly metadatas: readonly JsonObject[] | null;
}

/**
 * SQL: the rows of `stream` in `table` (aliased `alias`) that hold revision `from` and later: from
 * the one holding `from`, whose first revision may be before it (an index probe, then a range).
 * `on`: the SQL of one shard's streams, on a distributed ledger (stream-sql.ts onShard).
 */
export const rowsFrom = (table: string, alias: string, stream: string, from: string, on = ''): string =>
  `${alias}.stream = ${stream} AND ${alias}.revision >= coalesce((SELECT max(x.revision) FROM ${table} x WHERE x.stream = ${stream}${on === '' ? '' : ` AND x.stream = ANY(${on})`} AND x.revision <= ${from}), ${from})`;

export interface LedgerRow extends RowEvents {
  // int8 arrives as a string unless the application changed pg's type parsers; BigInt() and
  // Number() take either.
  readonly position: string;
  readonly transaction_id_text: string;
  readonly stream: string;
  /** The revision of its first event. */
  readonly revision: string;
  readonly created: Date;
}

/** The row's events at revision `from` and later, in order. */
export const eventsOfRow = (row: LedgerRow, from = 0): RecordedEvent[] => {
  const first = Number(row.revision);
  const commit = BigInt(row.transaction_id_text);
  const position = BigInt(row.position);
  const out: RecordedEvent[] = [];
  for (let i = Math.max(0, from - first); i < row.types.length; i++) {
    out.push({
      stream: row.stream,
      revision: first + i,
      position: { commit, prepare: eventPrepare(position, i) },
      type: row.types[i]!,
      data: row.data[i]!,
      metadata: row.metadatas?.[i] ?? row.metadata,
      eventId: row.ids[i]!,
      created: row.created,
    });
  }
  return out;
};

/** One event of a ledger row, read as a row of its own (the event store's READ_JOB_EVENTS_SQL). */
export interface EventRow {
  readonly position: string;
  readonly transaction_id_text: string;
  readonly stream: string;
  /** The event's own revision. */
  readonly revision: string;
  /** Its index in its ledger row (from 0): its position's last part. */
  readonly index: number;
  readonly type: string;
  readonly id: string;
  readonly data: JsonObject;
  readonly metadata: JsonObject;
  readonly created: Date;
}

/** The event an EventRow is: as eventsOfRow would give it from its whole ledger row. */
export const eventOfRow = (row: EventRow): RecordedEvent => ({
  stream: row.stream,
  revision: Number(row.revision),
  position: { commit: BigInt(row.transaction_id_text), prepare: eventPrepare(BigInt(row.position), row.index) },
  type: row.type,
  data: row.data,
  metadata: row.metadata,
  eventId: row.id,
  created: row.created,
});

/** Every event of the rows (in their order) at positions after `after`. */
export const eventsAfter = (rows: readonly LedgerRow[], after: GlobalPosition): RecordedEvent[] => {
  const out: RecordedEvent[] = [];
  for (const row of rows) {
    const events = eventsOfRow(row);
    const commit = events[0]!.position.commit;
    out.push(...(commit === after.commit ? events.filter((e) => e.position.prepare > after.prepare) : commit > after.commit ? events : []));
  }
  return out;
};

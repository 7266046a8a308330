import type { JsonObject, RecordedEvent } from '../../../domain/ports/event-store.js';

/** Channel notified at the commit of each transaction that appended (the payload is empty: a subscriber reads from its position). */
export const EVENTS_CHANNEL = 'jobledger_events';

// xid8 has no JavaScript type parser: it comes as text. The alias must not be `transaction_id`:
// ORDER BY transaction_id would then sort by the text, and '100000' < '99999'.
/** The columns a RecordedEvent is read from (xid8 as text: bigints arrive as strings). */
export const EVENT_COLUMNS =
  'global_position, transaction_id::text AS transaction_id_text, stream, stream_revision, type, data, metadata, event_id, created';

export interface EventRow {
  // int8 arrives as a string unless the application changed pg's type parsers; Number() and
  // BigInt() take either.
  readonly global_position: string;
  readonly transaction_id_text: string;
  readonly stream: string;
  readonly stream_revision: string;
  readonly type: string;
  readonly data: JsonObject;
  readonly metadata: JsonObject;
  readonly event_id: string;
  readonly created: Date;
}

export const toRecordedEvent = (row: EventRow): RecordedEvent => ({
  stream: row.stream,
  revision: Number(row.stream_revision),
  position: { commit: BigInt(row.transaction_id_text), prepare: BigInt(row.global_position) },
  type: row.type,
  data: row.data,
  metadata: row.metadata,
  eventId: row.event_id,
  created: row.created,
});

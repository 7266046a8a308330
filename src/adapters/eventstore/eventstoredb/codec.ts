import { randomUUID } from 'node:crypto';
import { jsonEvent, type EventData, type JSONType, type Position } from '@eventstore/db-client';
import type { EventToAppend, JsonObject, RecordedEvent } from '../../../domain/ports/event-store.js';
import { upcasters } from '../../../domain/upcasters.js';

// Events to and from EventStoreDB, as the PostgreSQL adapter writes and reads them: a JSON
// object as data, a JSON object as metadata ({} when none; the schema version stamped as
// write-transaction.ts stamps it), the caller's event id or a random UUID.

/** The fields of a client RecordedEvent this adapter reads (from a stream, $all or a subscription). */
export interface EsdbRecorded {
  readonly streamId: string;
  readonly id: string;
  readonly isJson: boolean;
  readonly revision: bigint;
  readonly type: string;
  readonly created: Date;
  readonly data: unknown;
  readonly metadata: unknown;
  readonly position?: Position;
}

/** An event in one of our streams that is not a JSON object, or read without its position. */
export class EventStoreDbDecodeError extends Error {
  override readonly name = 'EventStoreDbDecodeError';
  constructor(
    readonly stream: string,
    readonly revision: bigint,
    problem: string,
  ) {
    super(`EventStoreDB event ${JSON.stringify(stream)}@${revision}: ${problem}`);
  }
}

export const toEventData = (event: EventToAppend): EventData =>
  jsonEvent({
    id: event.eventId ?? randomUUID(),
    type: event.type,
    data: event.data as JSONType,
    metadata: upcasters.stamp(event.type, event.metadata ?? {}),
  });

const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);

/**
 * ESDB's own records: system streams ($stats-…, $$ metadata streams, $ce- category links) and
 * system event types ($>, $metadata, …). None is an event of ours, whatever the prefix asked.
 */
export const isSystem = (stream: string, type: string): boolean => stream.startsWith('$') || type.startsWith('$');

/** Ours in our terms, or undefined for a record that is not an event of ours (none, or a system one). */
export const toRecordedEvent = (resolved: { readonly event?: EsdbRecorded | undefined }): RecordedEvent | undefined => {
  const e = resolved.event;
  if (e === undefined || isSystem(e.streamId, e.type)) return undefined;
  if (!e.isJson || !isObject(e.data)) throw new EventStoreDbDecodeError(e.streamId, e.revision, 'its data is not a JSON object');
  if (e.metadata !== undefined && !isObject(e.metadata)) throw new EventStoreDbDecodeError(e.streamId, e.revision, 'its metadata is not a JSON object');
  // Stream reads carry positions from server 22.6 on; the port's events always have one.
  if (e.position === undefined) throw new EventStoreDbDecodeError(e.streamId, e.revision, 'read without its position (the server must be 22.6 or later)');
  return {
    stream: e.streamId,
    revision: Number(e.revision),
    position: { commit: e.position.commit, prepare: e.position.prepare },
    type: e.type,
    data: e.data,
    metadata: e.metadata ?? {},
    eventId: e.id,
    created: e.created,
  };
};

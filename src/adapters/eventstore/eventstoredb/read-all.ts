import type { EventStoreDBClient } from '@eventstore/db-client';
import { START, type GlobalPosition, type ReadAllOptions, type RecordedEvent } from '../../../domain/ports/event-store.js';
import { toRecordedEvent } from './codec.js';
import { batchDecided, batchLength, isAfter, toReadPosition } from './positions.js';

/** Records of $all asked for per round trip. */
export const READ_ALL_PAGE = 1_000;

/**
 * EventStore.readAll: $all page by page from `after`, ours only (no system record, only the
 * prefix's streams), until `maxCount` of them are decided. The client's readAll (6.2.1) takes no
 * server-side filter, so the records of other streams cross the wire and are dropped here: a
 * prefix read on a busy store costs the whole log's reading. Catch-up subscriptions
 * (./subscription.ts) filter on the server.
 */
export async function readAllEvents(client: EventStoreDBClient, options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
  const max = options.maxCount ?? Number.POSITIVE_INFINITY;
  const whole = options.wholeTransactions === true;
  const prefix = options.streamPrefix;
  const events: RecordedEvent[] = [];
  // The last record read of any stream: the next page starts there, and drops it.
  let cursor: GlobalPosition = options.after ?? START;
  for (;;) {
    let records = 0;
    for await (const resolved of client.readAll({ fromPosition: toReadPosition(cursor), maxCount: READ_ALL_PAGE })) {
      records++;
      const position = resolved.event?.position;
      if (position === undefined || !isAfter({ position }, cursor)) continue;
      cursor = position;
      // Others' streams are not decoded: they need not hold JSON.
      if (prefix !== undefined && !resolved.event!.streamId.startsWith(prefix)) continue;
      const event = toRecordedEvent(resolved);
      if (event !== undefined) events.push(event);
    }
    if (records < READ_ALL_PAGE || batchDecided(events, max, whole)) break;
  }
  return events.slice(0, batchLength(events, max, whole));
}

import { BACKWARDS, END, StreamNotFoundError, type EventStoreDBClient, type ResolvedEvent, type StreamingRead } from '@eventstore/db-client';
import type { ReadStreamOptions, RecordedEvent, StreamRevision } from '../../../domain/ports/event-store.js';
import { toRecordedEvent } from './codec.js';

/** Every event of a stream read, in our terms; [] for a stream that does not exist. */
const collect = async (read: StreamingRead<ResolvedEvent>): Promise<RecordedEvent[]> => {
  const events: RecordedEvent[] = [];
  try {
    for await (const resolved of read) {
      const event = toRecordedEvent(resolved);
      if (event !== undefined) events.push(event);
    }
  } catch (error) {
    if (error instanceof StreamNotFoundError) return [];
    throw error;
  }
  return events;
};

/**
 * EventStore.readStream. `leader`: read on the leader, which has every write it acknowledged (a
 * follower may not have it yet): for reading back what was just appended.
 */
export const readStreamEvents = async (client: EventStoreDBClient, stream: string, options: ReadStreamOptions = {}, leader = false): Promise<RecordedEvent[]> => {
  // The client sends a count of 0 as it is; asking for nothing needs no round trip.
  if (options.maxCount === 0) return [];
  return collect(
    client.readStream(stream, {
      fromRevision: BigInt(options.fromRevision ?? 0),
      ...(options.maxCount === undefined ? {} : { maxCount: options.maxCount }),
      ...(leader ? { requiresLeader: true } : {}),
    }),
  );
};

/** The revision of the stream's last event, read on the leader. */
export const currentRevision = async (client: EventStoreDBClient, stream: string): Promise<StreamRevision | 'no_stream'> => {
  const [last] = await collect(client.readStream(stream, { direction: BACKWARDS, fromRevision: END, maxCount: 1, requiresLeader: true }));
  return last === undefined ? 'no_stream' : last.revision;
};

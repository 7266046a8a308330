import { WrongExpectedVersionError, type EventStoreDBClient } from '@eventstore/db-client';
import { WrongExpectedRevisionError, type AppendResult, type StreamAppend, type StreamRevision } from '../../../domain/ports/event-store.js';
import { toEventData } from './codec.js';
import { currentRevision, readStreamEvents } from './read-stream.js';
import { combinedExpected, firstConflict, fromEsdbCurrent, lastRevisions, toEsdbExpected } from './revisions.js';

/**
 * Appends to one stream, in the caller's order, as one ESDB append: atomic, checked by the
 * server against the expected revision they combine to (./revisions.ts).
 *
 * The position answered for each append is its last event's as a read gives it, read back on
 * the leader: ESDB's append answers the write's position, which is not its last event's when it
 * holds several (and log formats differ in which it is).
 *
 * ESDB writes are idempotent by event id: appending again events it holds, at the revision they
 * were first appended at, is acknowledged without writing them twice (where PostgreSQL refuses).
 */
export async function appendToStream(client: EventStoreDBClient, stream: string, appends: readonly StreamAppend[]): Promise<AppendResult[]> {
  const expected = combinedExpected(appends);
  // No revision satisfies them all: the first that fails on the stream as it is says why.
  if (expected === undefined) throw conflictOf(appends, await currentRevision(client, stream));
  let written: bigint;
  try {
    ({ nextExpectedRevision: written } = await client.appendToStream(stream, appends.flatMap((append) => append.events.map(toEventData)), {
      expectedRevision: toEsdbExpected(expected),
    }));
  } catch (error) {
    if (error instanceof WrongExpectedVersionError) throw conflictOf(appends, fromEsdbCurrent(error.actualVersion));
    throw error;
  }
  const lasts = lastRevisions(appends, Number(written));
  const first = lasts[0]!;
  const read = await readStreamEvents(client, stream, { fromRevision: first, maxCount: lasts.at(-1)! - first + 1 }, true);
  const byRevision = new Map(read.map((event) => [event.revision, event]));
  return lasts.map((revision) => {
    const last = byRevision.get(revision);
    if (last === undefined) throw new Error(`EventStoreDB acknowledged the append to ${JSON.stringify(stream)} up to revision ${written}, but reading it back on the leader found no revision ${revision}`);
    return { stream, nextExpectedRevision: revision, position: last.position };
  });
}

const conflictOf = (appends: readonly StreamAppend[], actual: StreamRevision | 'no_stream'): WrongExpectedRevisionError =>
  firstConflict(appends, actual) ?? new WrongExpectedRevisionError(appends[0]!.stream, appends[0]!.expected, actual);

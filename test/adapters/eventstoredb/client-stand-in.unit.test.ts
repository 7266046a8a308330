import { PassThrough, Readable } from 'node:stream';
import { StreamNotFoundError, WrongExpectedVersionError, type AppendExpectedRevision, type EventData, type EventStoreDBClient, type Position, type ReadPosition } from '@eventstore/db-client';
import { describe, expect, it } from 'vitest';
import { EventStoreDbEventStore } from '../../../src/adapters/eventstore/eventstoredb/eventstoredb-event-store.js';
import { READ_ALL_PAGE } from '../../../src/adapters/eventstore/eventstoredb/read-all.js';
import { START, WrongExpectedRevisionError, comparePositions, type RecordedEvent } from '../../../src/domain/ports/event-store.js';
import { until } from '../../support/until.js';

// The adapter's appends, its $all reading and its catch-up loop, on stand-ins for the client (no
// server here: the contract suite runs the adapter against one). The $all stand-in serves records
// the way either reading of ESDB's start position could (inclusive or strictly after it), so the
// adapter must give the same answer on both.

const record = (i: number, stream: string, commit = BigInt(100 + i * 10)) => ({
  event: {
    streamId: stream,
    id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    isJson: true,
    revision: BigInt(i),
    type: stream.startsWith('$') ? '$statsCollected' : 'E',
    created: new Date(0),
    data: { i },
    metadata: undefined,
    position: { commit, prepare: BigInt(100 + i * 10) },
  },
});
type Record = ReturnType<typeof record>;

const at = (from: ReadPosition, r: Record, inclusive: boolean): boolean => {
  if (from === 'start') return true;
  if (from === 'end') return false;
  const c = comparePositions(r.event.position, from as Position);
  return inclusive ? c >= 0 : c > 0;
};

const readingFrom = (log: Record[], inclusive: boolean) =>
  ({
    readAll: ({ fromPosition = 'start', maxCount = Number.MAX_SAFE_INTEGER }: { fromPosition?: ReadPosition; maxCount?: number }) =>
      Readable.from(log.filter((r) => at(fromPosition, r, inclusive)).slice(0, Number(maxCount))),
  }) as unknown as EventStoreDBClient;

describe.each([true, false])('readAll on $all (start position inclusive: %s)', (inclusive) => {
  // More than two pages: ours, others' and the server's own records interleaved.
  const log = Array.from({ length: READ_ALL_PAGE * 2 + 500 }, (_, i) => record(i, i % 3 === 0 ? `mine-${i % 2}` : i % 3 === 1 ? 'theirs' : '$stats-node'));
  const store = new EventStoreDbEventStore(readingFrom(log, inclusive));
  const mine = log.filter((r) => r.event.streamId.startsWith('mine-'));
  const ours = log.filter((r) => !r.event.streamId.startsWith('$'));
  const revisions = (events: readonly RecordedEvent[]) => events.map((e) => e.revision);

  it('reads every page, ours only, strictly after the position asked', async () => {
    expect(revisions(await store.readAll({ streamPrefix: 'mine-' }))).toEqual(mine.map((r) => Number(r.event.revision)));
    expect(revisions(await store.readAll())).toEqual(ours.map((r) => Number(r.event.revision)));
    const after = mine[400]!.event.position;
    expect(revisions(await store.readAll({ streamPrefix: 'mine-', after, maxCount: 3 }))).toEqual(mine.slice(401, 404).map((r) => Number(r.event.revision)));
    expect(await store.readAll({ streamPrefix: 'mine-', after: mine.at(-1)!.event.position })).toEqual([]);
    expect(await store.readAll({ streamPrefix: 'nobody-', after: START })).toEqual([]);
  });

  it('keeps a write sharing a commit position whole when asked to, across pages', async () => {
    const shared = [record(0, 'mine-a', 50n), ...Array.from({ length: READ_ALL_PAGE + 5 }, (_, i) => record(i + 1, 'mine-a', 60n)), record(READ_ALL_PAGE + 6, 'mine-a', 70n)];
    const whole = new EventStoreDbEventStore(readingFrom(shared, inclusive));
    expect(await whole.readAll({ maxCount: 2, wholeTransactions: true })).toHaveLength(READ_ALL_PAGE + 6);
    expect(await whole.readAll({ maxCount: 2 })).toHaveLength(2);
  });
});

/** A client whose one subscription is a stream the test writes records into. */
const subscribing = () => {
  const source = Object.assign(new PassThrough({ objectMode: true }), {
    unsubscribe: async () => {
      source.end();
    },
  });
  const asked: unknown[] = [];
  const client = {
    subscribeToAll: (options: unknown) => {
      asked.push(options);
      return source;
    },
  } as unknown as EventStoreDBClient;
  return { source, asked, client };
};

describe('subscribe on $all', () => {
  it('filters on the server, drops the start position, hands batches of at most batchSize in order, and stops', async () => {
    const { source, asked, client } = subscribing();
    const store = new EventStoreDbEventStore(client);
    const batches: number[][] = [];
    const after = record(0, 'mine-a').event.position;
    const subscription = store.subscribe({ streamPrefix: 'mine-', after, batchSize: 4, pollIntervalMs: 10_000 }, async (events) => {
      batches.push(events.map((e) => e.revision));
    });
    expect(asked[0]).toMatchObject({ fromPosition: after, filter: { filterOn: 'streamName', prefixes: ['mine-'] } });
    for (let i = 0; i <= 10; i++) source.write(record(i, 'mine-a'));
    await until(async () => batches.flat().length, (n) => n >= 10, 'ten events');
    await subscription.stop();
    await expect(subscription.done).resolves.toBeUndefined();
    expect(batches.flat()).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(Math.max(...batches.map((b) => b.length))).toBeLessThanOrEqual(4);
    expect(source.writableEnded).toBe(true);
  });

  it('excludes system events on the server when no prefix is asked', () => {
    const { asked, client } = subscribing();
    const subscription = new EventStoreDbEventStore(client).subscribe({}, async () => undefined);
    expect(asked[0]).toMatchObject({ fromPosition: 'start', filter: { filterOn: 'eventType', regex: '^[^$].*' } });
    return subscription.stop();
  });

  it('ends with the handler’s error, and takes nothing more', async () => {
    const { source, client } = subscribing();
    const failure = new Error('handler failed');
    let calls = 0;
    const subscription = new EventStoreDbEventStore(client).subscribe({ batchSize: 1 }, async () => {
      calls++;
      throw failure;
    });
    source.write(record(1, 'mine-a'));
    source.write(record(2, 'mine-a'));
    await expect(subscription.done).rejects.toBe(failure);
    expect(calls).toBe(1);
  });

  it('ends with the connection’s error, and when the server ends it', async () => {
    const failing = subscribing();
    const lost = new Error('14 UNAVAILABLE');
    const subscription = new EventStoreDbEventStore(failing.client).subscribe({}, async () => undefined);
    failing.source.destroy(lost);
    await expect(subscription.done).rejects.toBe(lost);

    const ending = subscribing();
    const ended = new EventStoreDbEventStore(ending.client).subscribe({}, async () => undefined);
    ending.source.end();
    await expect(ended.done).rejects.toThrow(/ended the \$all subscription/);
  });
});

/** One stream's worth of a server: appends checked against the expected revision, reads by revision. */
const appending = () => {
  const streams = new Map<string, Record[]>();
  const calls: { stream: string; expectedRevision: AppendExpectedRevision | undefined; events: number }[] = [];
  let written = 0;
  const client = {
    appendToStream: async (stream: string, events: EventData[], { expectedRevision }: { expectedRevision?: AppendExpectedRevision } = {}) => {
      calls.push({ stream, expectedRevision, events: events.length });
      const held = streams.get(stream) ?? [];
      const current = held.length === 0 ? 'no_stream' : BigInt(held.length - 1);
      if (expectedRevision !== undefined && expectedRevision !== 'any' && expectedRevision !== current) {
        throw new WrongExpectedVersionError(undefined, { streamName: stream, expected: expectedRevision, current });
      }
      events.forEach(() => held.push(record(held.length, stream, BigInt(1_000 + written++))));
      streams.set(stream, held);
      // The write's position, not its last event's: the adapter reads that back.
      return { success: true, nextExpectedRevision: BigInt(held.length - 1), position: { commit: 1n, prepare: 1n } };
    },
    readStream: (stream: string, { fromRevision = 0n, maxCount = Number.MAX_SAFE_INTEGER, direction = 'forwards' }: { fromRevision?: bigint | 'end'; maxCount?: number; direction?: string } = {}) => {
      const held = streams.get(stream);
      if (held === undefined) {
        const missing = new Readable({ objectMode: true, read: () => undefined });
        process.nextTick(() => missing.destroy(new StreamNotFoundError(undefined, stream)));
        return missing;
      }
      const ordered = direction === 'backwards' ? [...held].reverse() : held.filter((r) => r.event.revision >= (fromRevision as bigint));
      return Readable.from(ordered.slice(0, maxCount));
    },
  } as unknown as EventStoreDBClient;
  return { client, calls, streams };
};

describe('append on one stream', () => {
  const e = (type: string) => ({ type, data: {} });

  it('writes the appends of one stream as one ESDB append, answering each one’s last event’s position', async () => {
    const { client, calls } = appending();
    const store = new EventStoreDbEventStore(client);
    const results = await store.appendMany([
      { stream: 'a', expected: 'any', events: [e('A0'), e('A1')] },
      { stream: 'a', expected: 1, events: [e('A2')] },
    ]);
    expect(calls).toEqual([{ stream: 'a', expectedRevision: 'no_stream', events: 3 }]);
    const read = await store.readStream('a');
    expect(results).toEqual([
      { stream: 'a', nextExpectedRevision: 1, position: read[1]!.position },
      { stream: 'a', nextExpectedRevision: 2, position: read[2]!.position },
    ]);
    expect((await store.append('a', 2, [e('A3')])).position).toEqual((await store.readStream('a', { fromRevision: 3 }))[0]!.position);
  });

  it('names the append that fails, with the revision it met: from the server, or read when no revision could do', async () => {
    const { client, calls } = appending();
    const store = new EventStoreDbEventStore(client);
    await store.append('a', 'no_stream', [e('A0'), e('A1')]);
    const refused = (promise: Promise<unknown>) => promise.then(() => undefined, (error: unknown) => error);
    const fromServer = await refused(store.appendMany([{ stream: 'a', expected: 'any', events: [e('X')] }, { stream: 'a', expected: 0, events: [e('Y')] }]));
    expect(fromServer).toBeInstanceOf(WrongExpectedRevisionError);
    expect(fromServer).toMatchObject({ stream: 'a', expected: 0, actual: 2 });
    expect(await refused(store.append('b', 0, [e('X')]))).toMatchObject({ stream: 'b', expected: 0, actual: 'no_stream' });
    const sent = calls.length;
    expect(await refused(store.appendMany([{ stream: 'a', expected: 1, events: [e('X')] }, { stream: 'a', expected: 1, events: [e('Y')] }]))).toMatchObject({ expected: 1, actual: 2 });
    expect(calls).toHaveLength(sent);
    expect(await store.readStream('a')).toHaveLength(2);
  });

  it('refuses appends spanning streams before sending anything, and reads a missing stream as empty', async () => {
    const { client, calls } = appending();
    const store = new EventStoreDbEventStore(client);
    await expect(store.appendMany([{ stream: 'a', expected: 'any', events: [e('A')] }, { stream: 'b', expected: 'any', events: [e('B')] }])).rejects.toMatchObject({
      name: 'UnsupportedOperationError',
      operation: 'appendMany',
    });
    await expect(store.recordedEventIds([])).rejects.toMatchObject({ name: 'UnsupportedOperationError', operation: 'recordedEventIds' });
    expect(calls).toEqual([]);
    expect(await store.readStream('a')).toEqual([]);
    expect(await store.readStreams([{ stream: 'a', fromRevision: 0 }])).toEqual(new Map([['a', []]]));
  });
});

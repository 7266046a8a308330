import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { EventStoreDbDecodeError, toEventData, toRecordedEvent, type EsdbRecorded } from '../../../src/adapters/eventstore/eventstoredb/codec.js';
import { batchDecided, batchLength, isAfter, toReadPosition } from '../../../src/adapters/eventstore/eventstoredb/positions.js';
import { combinedExpected, firstConflict, fromEsdbCurrent, lastRevisions, toEsdbExpected } from '../../../src/adapters/eventstore/eventstoredb/revisions.js';
import { START, WrongExpectedRevisionError, type ExpectedRevision, type RecordedEvent, type StreamAppend } from '../../../src/domain/ports/event-store.js';
import { EVENT_SCHEMA_KEY } from '../../../src/domain/upcasters.js';

// The EventStoreDB adapter's pure parts; the adapter against a server is the contract suite's
// (test/contract/eventstoredb-event-store.int.test.ts).

const S = 's';
const appends = (...spec: [ExpectedRevision, number][]): StreamAppend[] =>
  spec.map(([expected, n]) => ({ stream: S, expected, events: Array.from({ length: n }, () => ({ type: 'E', data: {} })) }));

describe('expected revisions', () => {
  it('map onto ESDB’s: any, no_stream, a bigint revision; and back from its current revision', () => {
    expect(toEsdbExpected('any')).toBe('any');
    expect(toEsdbExpected('no_stream')).toBe('no_stream');
    expect(toEsdbExpected(7)).toBe(7n);
    expect(fromEsdbCurrent('no_stream')).toBe('no_stream');
    expect(fromEsdbCurrent(4n)).toBe(4);
    expect(fromEsdbCurrent(-1n)).toBe('no_stream');
  });

  it('combine the appends of one stream into the revision it must be at before the first', () => {
    expect(combinedExpected(appends(['any', 1], ['any', 2]))).toBe('any');
    expect(combinedExpected(appends([3, 1]))).toBe(3);
    expect(combinedExpected(appends(['no_stream', 2], [1, 1], ['any', 1]))).toBe('no_stream');
    // Unchecked first, checked later: the later one's expectation, counted back.
    expect(combinedExpected(appends(['any', 1], [0, 1]))).toBe('no_stream');
    expect(combinedExpected(appends(['any', 2], [5, 1]))).toBe(3);
    // No revision satisfies both, or one that comes after events expects no stream.
    expect(combinedExpected(appends([3, 1], [3, 1]))).toBeUndefined();
    expect(combinedExpected(appends(['any', 1], ['no_stream', 1]))).toBeUndefined();
  });

  it('name the first append that fails on the stream as it is, with the revision it met', () => {
    expect(firstConflict(appends([3, 1], [3, 1]), 3)).toMatchObject({ stream: S, expected: 3, actual: 4 });
    expect(firstConflict(appends(['any', 1], [0, 1]), 3)).toMatchObject({ expected: 0, actual: 4 });
    expect(firstConflict(appends([0, 1]), 'no_stream')).toMatchObject({ expected: 0, actual: 'no_stream' });
    expect(firstConflict(appends(['no_stream', 1]), 2)).toBeInstanceOf(WrongExpectedRevisionError);
    expect(firstConflict(appends(['no_stream', 2], [1, 1]), 'no_stream')).toBeUndefined();
  });

  it('accept exactly when the one ESDB append would: combined, and the server’s check passing', () => {
    const expected = fc.oneof(fc.constant<ExpectedRevision>('any'), fc.constant<ExpectedRevision>('no_stream'), fc.integer({ min: 0, max: 6 }));
    const actual = fc.oneof(fc.constant<'no_stream'>('no_stream'), fc.integer({ min: 0, max: 6 }));
    fc.assert(
      fc.property(fc.array(fc.tuple(expected, fc.integer({ min: 1, max: 3 })), { minLength: 1, maxLength: 4 }), actual, (spec, at) => {
        const batch = appends(...spec);
        const combined = combinedExpected(batch);
        const serverAccepts = combined !== undefined && (combined === 'any' || combined === at);
        expect(firstConflict(batch, at) === undefined).toBe(serverAccepts);
      }),
    );
  });

  it('give each append’s last revision from the last one written', () => {
    expect(lastRevisions(appends(['no_stream', 2], [1, 1], ['any', 1]), 3)).toEqual([1, 2, 3]);
    expect(lastRevisions(appends([9, 1]), 10)).toEqual([10]);
  });
});

describe('positions', () => {
  const at = (commit: bigint, prepare = commit): RecordedEvent => ({
    stream: S,
    revision: 0,
    position: { commit, prepare },
    type: 'E',
    data: {},
    metadata: {},
    eventId: 'x',
    created: new Date(0),
  });

  it('read from ESDB’s start for START, else from the position itself, keeping only what is strictly after', () => {
    expect(toReadPosition(START)).toBe('start');
    expect(toReadPosition({ commit: 120n, prepare: 80n })).toEqual({ commit: 120n, prepare: 80n });
    expect(isAfter(at(5n), { commit: 5n, prepare: 5n })).toBe(false);
    expect(isAfter(at(5n, 6n), { commit: 5n, prepare: 5n })).toBe(true);
    expect(isAfter(at(4n, 9n), { commit: 5n, prepare: 0n })).toBe(false);
  });

  it('cut batches at the maximum, or past it to the end of the write sharing a commit position', () => {
    const events = [at(1n), at(2n, 2n), at(2n, 3n), at(2n, 4n), at(5n)];
    expect(batchLength(events, 10, true)).toBe(5);
    expect(batchLength(events, 2, false)).toBe(2);
    expect(batchLength(events, 2, true)).toBe(4);
    expect(batchLength(events, 1, true)).toBe(1);
    expect(batchLength(events, 0, true)).toBe(0);
    expect(batchDecided(events, 2, true)).toBe(true);
    // The write may go on past what was read: not decided yet.
    expect(batchDecided(events.slice(0, 4), 2, true)).toBe(false);
    expect(batchDecided(events.slice(0, 4), 2, false)).toBe(true);
    expect(batchDecided(events, 5, false)).toBe(false);
  });
});

describe('events', () => {
  const recorded = (overrides: Partial<EsdbRecorded> = {}): EsdbRecorded => ({
    streamId: 'key:a',
    id: '6a1f4f1c-8a53-4d7e-9a57-3f0c2b9d1e77',
    isJson: true,
    revision: 3n,
    type: 'JobEnqueued',
    created: new Date('2026-01-02T03:04:05Z'),
    data: { jobId: 'j' },
    metadata: { by: 'test' },
    position: { commit: 900n, prepare: 880n },
    ...overrides,
  });

  it('are written as JSON with the given id, or a random UUID, and their metadata as the PostgreSQL adapter stamps it', () => {
    const given = toEventData({ type: 'T', data: { n: 1 }, metadata: { by: 'me', [EVENT_SCHEMA_KEY]: 9 }, eventId: '6a1f4f1c-8a53-4d7e-9a57-3f0c2b9d1e77' });
    expect(given).toEqual({ id: '6a1f4f1c-8a53-4d7e-9a57-3f0c2b9d1e77', contentType: 'application/json', type: 'T', data: { n: 1 }, metadata: { by: 'me' } });
    const fresh = toEventData({ type: 'T', data: {} });
    expect(fresh.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(fresh.metadata).toEqual({});
  });

  it('are read in the port’s terms: number revisions, $all positions, {} for no metadata', () => {
    expect(toRecordedEvent({ event: recorded() })).toEqual({
      stream: 'key:a',
      revision: 3,
      position: { commit: 900n, prepare: 880n },
      type: 'JobEnqueued',
      data: { jobId: 'j' },
      metadata: { by: 'test' },
      eventId: '6a1f4f1c-8a53-4d7e-9a57-3f0c2b9d1e77',
      created: new Date('2026-01-02T03:04:05Z'),
    });
    expect(toRecordedEvent({ event: recorded({ metadata: undefined }) })?.metadata).toEqual({});
  });

  it('leave out what is not ours: no event, system streams and system event types', () => {
    expect(toRecordedEvent({})).toBeUndefined();
    expect(toRecordedEvent({ event: recorded({ streamId: '$stats-127.0.0.1:2113' }) })).toBeUndefined();
    expect(toRecordedEvent({ event: recorded({ streamId: '$ce-key', type: '$>' }) })).toBeUndefined();
    expect(toRecordedEvent({ event: recorded({ type: '$metadata' }) })).toBeUndefined();
  });

  it('refuse an event of ours that is not JSON objects, or has no position', () => {
    expect(() => toRecordedEvent({ event: recorded({ isJson: false, data: new Uint8Array([1]) }) })).toThrow(EventStoreDbDecodeError);
    expect(() => toRecordedEvent({ event: recorded({ data: [1, 2] }) })).toThrow(/data is not a JSON object/);
    expect(() => toRecordedEvent({ event: recorded({ metadata: new Uint8Array([1]) }) })).toThrow(/metadata is not a JSON object/);
    expect(() => toRecordedEvent({ event: recorded({ position: undefined }) })).toThrow(/22\.6 or later/);
  });
});

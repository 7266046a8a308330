import { ANY, NO_STREAM, type AppendExpectedRevision, type CurrentRevision } from '@eventstore/db-client';
import { WrongExpectedRevisionError, type ExpectedRevision, type StreamAppend, type StreamRevision } from '../../../domain/ports/event-store.js';

// Expected revisions between the port and ESDB, and appendMany over one stream as the one atomic
// append ESDB can make: the port's semantics (PostgresEventStore.appendMany) are that appends
// naming a stream twice are written in the caller's order, each checked against what the stream
// is at once the earlier ones are written.

/** -1 stands for "no stream" in the arithmetic below, as in write-transaction.ts. */
const NONE = -1;
const asNumber = (r: StreamRevision | 'no_stream'): number => (r === 'no_stream' ? NONE : r);
const asRevision = (n: number): StreamRevision | 'no_stream' => (n === NONE ? 'no_stream' : n);

export const toEsdbExpected = (expected: ExpectedRevision): AppendExpectedRevision =>
  expected === 'any' ? ANY : expected === 'no_stream' ? NO_STREAM : BigInt(expected);

/** Servers that report a conflict as an RPC error's metadata give a missing stream's revision as -1. */
export const fromEsdbCurrent = (current: CurrentRevision): StreamRevision | 'no_stream' => (current === NO_STREAM || current < 0n ? 'no_stream' : Number(current));

/**
 * The revision the stream must be at before the first of `appends` (all to one stream) for every
 * one's expectation to hold, as one append's expected revision: 'any' when none expects one;
 * undefined when they contradict each other (then no state of the stream satisfies them all).
 */
export const combinedExpected = (appends: readonly StreamAppend[]): ExpectedRevision | undefined => {
  let before = 0;
  let base: number | undefined;
  for (const append of appends) {
    if (append.expected !== 'any') {
      const implied = asNumber(append.expected) - before;
      if (implied < NONE || (base !== undefined && implied !== base)) return undefined;
      base = implied;
    }
    before += append.events.length;
  }
  return base === undefined ? 'any' : asRevision(base);
};

/** The first of `appends` whose expectation fails on a stream at `actual`, as the port's error; undefined when none does. */
export const firstConflict = (appends: readonly StreamAppend[], actual: StreamRevision | 'no_stream'): WrongExpectedRevisionError | undefined => {
  let at = asNumber(actual);
  for (const append of appends) {
    if (append.expected !== 'any' && asNumber(append.expected) !== at) return new WrongExpectedRevisionError(append.stream, append.expected, asRevision(at));
    at += append.events.length;
  }
  return undefined;
};

/** The revision of each append's last event, given the revision of the last event written. */
export const lastRevisions = (appends: readonly StreamAppend[], last: StreamRevision): StreamRevision[] => {
  let at = last - appends.reduce((n, append) => n + append.events.length, 0);
  return appends.map((append) => (at += append.events.length));
};

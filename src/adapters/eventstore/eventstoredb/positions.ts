import { START as ESDB_START, type ReadPosition } from '@eventstore/db-client';
import { START, comparePositions, type GlobalPosition, type RecordedEvent } from '../../../domain/ports/event-store.js';

// $all positions are the port's GlobalPosition as they are: ESDB's {commit, prepare} in its
// transaction log, ordered by (commit, prepare) like the port's. Reads there only ever show
// committed writes in log order, so nothing can appear before an event already read: the
// snapshot rule the PostgreSQL adapter needs has no counterpart here.

/** Where to start reading $all for events strictly after `after` (callers drop `after` itself: see isAfter). */
export const toReadPosition = (after: GlobalPosition): ReadPosition =>
  comparePositions(after, START) === 0 ? ESDB_START : { commit: after.commit, prepare: after.prepare };

/** Reading from a position may return the event at it (reads are inclusive): only what is strictly after counts. */
export const isAfter = (event: { readonly position: GlobalPosition }, after: GlobalPosition): boolean => comparePositions(event.position, after) > 0;

/**
 * How many of `events` (in $all order) a batch of at most `max` takes. `whole`: the events of
 * one write that share a commit position are not split, so a batch may run past `max` — as
 * far as `events` holds them. (Servers that give every event of a write its own commit position
 * do not show where a write ends: there a batch may end inside one.)
 */
export const batchLength = (events: readonly RecordedEvent[], max: number, whole: boolean): number => {
  if (events.length <= max) return events.length;
  if (!whole || max === 0) return max;
  const commit = events[max - 1]!.position.commit;
  let n = max;
  while (n < events.length && events[n]!.position.commit === commit) n++;
  return n;
};

/** Whether `events` decide batchLength: more than `max` of them, and (`whole`) one past the last write taken. */
export const batchDecided = (events: readonly RecordedEvent[], max: number, whole: boolean): boolean =>
  events.length > max && batchLength(events, max, whole) < events.length;

import * as E from 'fp-ts/lib/Either.js';
import { expect } from 'vitest';
import { decodeCommand, type Command } from '../../src/domain/commands.js';
import { decideAll, type FillLater } from '../../src/domain/decide/index.js';
import type { DomainError } from '../../src/domain/errors.js';
import { mk, type EventData, type KeyEvent } from '../../src/domain/events.js';
import { fold, initialKeyState, type KeyState } from '../../src/domain/key-state.js';
import { T0, withoutLines } from './spec.js';

const linesOff = (streams: Streams): Streams => Object.fromEntries(Object.entries(streams).map(([s, es]) => [s, withoutLines(es)]));

// Given/when/then over several streams (a job under further limits): the history of each stream,
// a command on one of them, and the events the decision writes on each stream — or the refusal,
// with nothing written anywhere. A stream absent from the history is a new one.

/** Events per stream, by stream name ("key:<key>"). */
export type Streams = Readonly<Record<string, readonly KeyEvent[]>>;

const statesOf = (history: Streams): Map<string, KeyState> =>
  new Map(Object.entries(history).map(([s, events]) => [s, fold(initialKeyState, events)]));

/** Only the streams the decision wrote on (a stream it merely read has no events). */
const written = (events: ReadonlyMap<string, readonly KeyEvent[]>): Record<string, readonly KeyEvent[]> =>
  Object.fromEntries([...events].filter(([, es]) => es.length > 0));

export const givenAcross = (history: Streams = {}) => ({
  when: (command: Command, stream: string, now = T0) => {
    // Specs only send commands that pass the codecs, like the command layer does.
    expect(decodeCommand(command)).toEqual(E.right(command));
    const states = statesOf(history);
    const outcome = decideAll(command, stream, states, now);
    // With every stream given (an absent one is new) the decision never needs another.
    if (outcome.tag !== 'decided') throw new Error(`decideAll asked for streams ${outcome.streams.join(', ')}`);
    const { result, fillLater } = outcome;
    const events = (): Record<string, readonly KeyEvent[]> => {
      if (E.isLeft(result)) throw new Error(`refused: ${JSON.stringify(result.left)}`);
      return written(result.right);
    };
    return {
      /** The events written on each stream (streams not named: nothing written), and no follow-up FillSlots. */
      then: (expected: Streams) => {
        expect(result).toEqual(E.right(expect.anything()));
        expect(linesOff(events())).toEqual(linesOff(expected));
        expect(fillLater).toEqual(new Map());
      },
      thenNothing: () => {
        expect(result).toEqual(E.right(expect.anything()));
        expect(events()).toEqual({});
        expect(fillLater).toEqual(new Map());
      },
      /** Refused, and nothing written on any stream. */
      thenRefused: (error: DomainError) => {
        expect(result).toEqual(E.left(error));
        expect(fillLater).toEqual(new Map());
      },
      fillLater: (): ReadonlyMap<string, FillLater> => fillLater,
      /** The histories with what the decision wrote appended: the `given` of a next spec. */
      history: (): Streams => {
        const out: Record<string, readonly KeyEvent[]> = { ...history };
        for (const [s, es] of Object.entries(events())) out[s] = [...(out[s] ?? []), ...es];
        return out;
      },
      /** Each stream's state after the decision (the histories folded with what it wrote). */
      states: (): Map<string, KeyState> => {
        const out = new Map(states);
        if (E.isRight(result)) for (const [s, es] of result.right) out.set(s, fold(out.get(s) ?? initialKeyState, es));
        return out;
      },
    };
  },
});

type Data<T extends KeyEvent['type']> = Omit<EventData<T>, 'at'>;
const ev =
  <T extends KeyEvent['type']>(type: T) =>
  (data: Data<T>, at = T0) =>
    mk(type, { ...data, at } as unknown as EventData<T>);

// A limit key's record of the jobs of other streams (its guests).
export const limitWaiting = (jobId: string, home: string, limits: readonly string[], priority = 0, at = T0) =>
  ev('LimitWaiting')({ jobId, home, limits: [...limits], priority }, at);
export const limitHeld = (jobId: string, home: string, limits: readonly string[], leaseId: string, at = T0, waitedMs = 0, priority = 0) =>
  ev('LimitHeld')({ jobId, home, limits: [...limits], priority, leaseId, waitedMs }, at);
export const limitReleased = (jobId: string, leaseId: string, reason: EventData<'LimitReleased'>['reason'], at = T0) =>
  ev('LimitReleased')({ jobId, leaseId, reason }, at);
export const limitLeft = (jobId: string, reason: string, at = T0) => ev('LimitLeft')({ jobId, reason }, at);

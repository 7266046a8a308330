import * as E from 'fp-ts/lib/Either.js';
import type { Either } from 'fp-ts/lib/Either.js';
import type { Command } from '../commands.js';
import type { DomainError } from '../errors.js';
import type { KeyEvent } from '../events.js';
import { Scratch, draftOf, initialKeyState, type KeyState, type LinePlace, type ScratchMark } from '../key-state.js';
import { admitDue } from './admit-due.js';
import { cancel } from './cancel.js';
import { complete } from './complete.js';
import { Decision, StreamsNeeded, type Across } from './decision.js';
import { declareLimit } from './declare-limit.js';
import { discardParked } from './discard-parked.js';
import { enqueue } from './enqueue.js';
import { expireLeases } from './expire-leases.js';
import { fail } from './fail.js';
import { fillSlots } from './fill-slots.js';
import { pauseKey, resumeKey } from './pause.js';
import { renew } from './renew.js';
import { retryJob, discardDead } from './retry-job.js';
import { revokeLease } from './revoke-lease.js';
import { setLimit } from './set-limit.js';
import { start } from './start.js';
import { stopped } from './stopped.js';
import { yieldSlot } from './yield.js';

/**
 * The key's decider: pure, with time passed in. An empty list means "nothing to do". Every other
 * stream the decision reads (a queue's cap, a further limit) is taken as one with no events yet:
 * a key alone, as specs and properties speak of it (decideAll gives the others their states).
 */
export const decide = (command: Command, state: KeyState, now: number): Either<DomainError, readonly KeyEvent[]> =>
  decideInto(command, new Scratch(draftOf(state)), now);

/**
 * The same decision on a state its caller owns, without copying the key's job table: the events
 * are applied to it through `scratch` as they are decided, and stay applied when the command is
 * accepted; a refusal is rolled back, so it changes nothing. Decides what decide() decides, by
 * the key writer's own path (decideAcross) on one stream, the others new (as in decide()).
 */
export const decideInto = (command: Command, scratch: Scratch, now: number): Either<DomainError, readonly KeyEvent[]> => {
  const others = new Map<string, Scratch>();
  const scratchOf = (s: string): Scratch => {
    if (s === '') return scratch;
    let other = others.get(s);
    if (other === undefined) others.set(s, (other = new Scratch(draftOf(initialKeyState))));
    return other;
  };
  const outcome = decideAcross(command, '', scratchOf, now);
  if (outcome.tag === 'needs') throw new StreamsNeeded(outcome.streams);
  return E.map((events: ReadonlyMap<string, readonly KeyEvent[]>) => events.get('') ?? [])(outcome.result);
};

/** Lines one decision serves at most before the rest is left to FillSlots. */
const MAX_LINES_SERVED = 10_000;

/** A line to serve in a decision of its own: from `after`, with `needs` at hand. */
export interface FillLater {
  readonly after: LinePlace | undefined;
  readonly needs: readonly string[];
}

/** What a decision over several streams decided. */
export type AcrossOutcome =
  | {
      readonly tag: 'decided';
      readonly result: Either<DomainError, ReadonlyMap<string, readonly KeyEvent[]>>;
      /** Keys whose line reached jobs whose streams were not at hand: serve each from its place (FillSlots), with those streams. */
      readonly fillLater: ReadonlyMap<string, FillLater>;
    }
  /** Streams the decision needs and was not given: nothing of it was kept. */
  | { readonly tag: 'needs'; readonly streams: readonly string[] };

/**
 * A command on `stream` decided on every stream it touches (a job under further limits: its limit
 * keys; a released slot of a limit key: the jobs of other streams in its line), each state its
 * caller's through its Scratch (`scratchOf`: undefined for a stream not at hand). A refusal, or
 * a need for a stream not at hand, rolls every touched state back. Afterwards the line of every
 * limit key whose slot went free is served, in the same decision.
 */
export const decideAcross = (command: Command, stream: string, scratchOf: (stream: string) => Scratch | undefined, now: number): AcrossOutcome => {
  const touched = new Map<string, { readonly decision: Decision; readonly scratch: Scratch; readonly mark: ScratchMark }>();
  const queued: string[] = [];
  let serving = false;
  let served = 0;
  const fillLater = new Map<string, FillLater>();
  const across: Across = {
    on: (s) => {
      const known = touched.get(s);
      if (known !== undefined) return known.decision;
      const scratch = scratchOf(s);
      if (scratch === undefined) return undefined;
      const decision = new Decision(scratch.draft, now, (event) => scratch.apply(event), s, across);
      touched.set(s, { decision, scratch, mark: scratch.mark() });
      return decision;
    },
    serve: (s) => {
      if (!queued.includes(s)) queued.push(s);
    },
    serveQueued: () => {
      if (serving) return;
      serving = true;
      try {
        for (let s = queued.shift(); s !== undefined; s = queued.shift()) {
          // A bound, not a limit anyone should meet: each round promotes, or asks for a line ahead in the one fair order.
          if (++served > MAX_LINES_SERVED) across.fillLater(s, undefined, []);
          else across.on(s)!.fillSlots();
        }
      } finally {
        serving = false;
      }
    },
    fillLater: (s, after, needs) => {
      const known = fillLater.get(s);
      // The first place asked for is the earliest: the line is served from there, with every stream asked for.
      fillLater.set(s, known === undefined ? { after, needs } : { after: known.after, needs: [...new Set([...known.needs, ...needs])] });
    },
  };
  const rollback = () => {
    for (const { scratch, mark } of touched.values()) scratch.rollbackTo(mark);
  };
  try {
    const home = across.on(stream);
    if (home === undefined) throw new StreamsNeeded([stream]);
    const result = decideWith(command, home);
    if (E.isLeft(result)) {
      rollback();
      return { tag: 'decided', result: E.left(result.left), fillLater: new Map() };
    }
    across.serveQueued();
    return { tag: 'decided', result: E.right(new Map([...touched].map(([s, t]) => [s, t.decision.events]))), fillLater };
  } catch (error) {
    rollback();
    if (error instanceof StreamsNeeded) return { tag: 'needs', streams: error.streams };
    throw error;
  }
};

/**
 * decideAcross on states the caller keeps (copied, never changed): the pure decider over several
 * streams, for specs and properties. A stream absent from `states` is a new one.
 */
export const decideAll = (command: Command, stream: string, states: ReadonlyMap<string, KeyState>, now: number): AcrossOutcome => {
  const scratches = new Map<string, Scratch>();
  return decideAcross(
    command,
    stream,
    (s) => {
      let scratch = scratches.get(s);
      if (scratch === undefined) scratches.set(s, (scratch = new Scratch(draftOf(states.get(s) ?? initialKeyState))));
      return scratch;
    },
    now,
  );
};

const decideWith = (command: Command, d: Decision): Either<DomainError, readonly KeyEvent[]> => {
  switch (command.type) {
    case 'Enqueue':
    case 'EnqueueMany':
      return enqueue(command, d);
    case 'AdmitDue':
      return admitDue(d);
    case 'Start':
      return start(command, d);
    case 'Renew':
      return renew(command, d);
    case 'Complete':
      return complete(command, d);
    case 'Fail':
      return fail(command, d);
    case 'Yield':
      return yieldSlot(command, d);
    case 'Stopped':
      return stopped(command, d);
    case 'ExpireLeases':
      return expireLeases(command, d);
    case 'SetLimit':
      return setLimit(command, d);
    case 'DeclareLimit':
      return declareLimit(command, d);
    case 'PauseKey':
      return pauseKey(command, d);
    case 'ResumeKey':
      return resumeKey(command, d);
    case 'FillSlots':
      return fillSlots(command, d);
    case 'RevokeLease':
      return revokeLease(command, d);
    case 'DiscardParked':
      return discardParked(command, d);
    case 'Cancel':
      return cancel(command, d);
    case 'RetryJob':
      return retryJob(command, d);
    case 'DiscardDead':
      return discardDead(command, d);
  }
};

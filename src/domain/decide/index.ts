import * as E from 'fp-ts/lib/Either.js';
import type { Either } from 'fp-ts/lib/Either.js';
import type { Command } from '../commands.js';
import type { DomainError } from '../errors.js';
import type { KeyEvent } from '../events.js';
import { draftOf, type KeyState, type Scratch } from '../key-state.js';
import { admitDue } from './admit-due.js';
import { cancel } from './cancel.js';
import { complete } from './complete.js';
import { Decision } from './decision.js';
import { discardParked } from './discard-parked.js';
import { enqueue } from './enqueue.js';
import { expireLeases } from './expire-leases.js';
import { fail } from './fail.js';
import { pauseKey, resumeKey } from './pause.js';
import { renew } from './renew.js';
import { revokeLease } from './revoke-lease.js';
import { setLimit } from './set-limit.js';
import { start } from './start.js';
import { yieldSlot } from './yield.js';

/** The key's decider: pure, with time passed in. An empty list means "nothing to do". */
export const decide = (command: Command, state: KeyState, now: number): Either<DomainError, readonly KeyEvent[]> =>
  decideWith(command, new Decision(draftOf(state), now));

/**
 * The same decision on a state its caller owns, without copying the key's job table: the events
 * are applied to it through `scratch` as they are decided, and stay applied when the command is
 * accepted; a refusal is rolled back, so it changes nothing. Decides what decide() decides.
 */
export const decideInto = (command: Command, scratch: Scratch, now: number): Either<DomainError, readonly KeyEvent[]> => {
  const mark = scratch.mark();
  const result = decideWith(command, new Decision(scratch.draft, now, (event) => scratch.apply(event)));
  if (E.isLeft(result)) scratch.rollbackTo(mark);
  return result;
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
    case 'ExpireLeases':
      return expireLeases(command, d);
    case 'SetLimit':
      return setLimit(command, d);
    case 'PauseKey':
      return pauseKey(command, d);
    case 'ResumeKey':
      return resumeKey(command, d);
    case 'RevokeLease':
      return revokeLease(command, d);
    case 'DiscardParked':
      return discardParked(command, d);
    case 'Cancel':
      return cancel(command, d);
  }
};

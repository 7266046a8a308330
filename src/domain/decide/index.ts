import type { Either } from 'fp-ts/lib/Either.js';
import type { Command } from '../commands.js';
import type { DomainError } from '../errors.js';
import type { KeyEvent } from '../events.js';
import { Scratch, draftOf, type Draft, type KeyState } from '../key-state.js';
import { admitDue } from './admit-due.js';
import { cancel } from './cancel.js';
import { complete } from './complete.js';
import { Decision } from './decision.js';
import { discardParked } from './discard-parked.js';
import { enqueue } from './enqueue.js';
import { expireLeases } from './expire-leases.js';
import { fail } from './fail.js';
import { renew } from './renew.js';
import { revokeLease } from './revoke-lease.js';
import { setLimit } from './set-limit.js';
import { start } from './start.js';
import { yieldSlot } from './yield.js';

/** The key's decider: pure, with time passed in. An empty list means "nothing to do". */
export const decide = (command: Command, state: KeyState, now: number): Either<DomainError, readonly KeyEvent[]> =>
  decideWith(command, new Decision(draftOf(state), now));

/**
 * The same decision without copying the key's job table: `state` (which the caller owns) is
 * changed while the decision runs and put back as it was before this returns. For the command
 * handler, whose keys may hold thousands of jobs; the result equals decide()'s.
 */
export const decideInPlace = (command: Command, state: KeyState, now: number): Either<DomainError, readonly KeyEvent[]> => {
  const scratch = new Scratch(state as Draft);
  try {
    return decideWith(command, new Decision(scratch.draft, now, (event) => scratch.apply(event)));
  } finally {
    scratch.rollback();
  }
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
    case 'RevokeLease':
      return revokeLease(command, d);
    case 'DiscardParked':
      return discardParked(command, d);
    case 'Cancel':
      return cancel(command, d);
  }
};

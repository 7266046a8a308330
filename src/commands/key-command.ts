import type * as E from 'fp-ts/lib/Either.js';
import type { Command } from '../domain/commands.js';
import type { DomainError } from '../domain/errors.js';
import type { KeyEvent } from '../domain/events.js';
import type { KeyState } from '../domain/key-state.js';
import type { JsonObject, StreamRevision } from '../domain/ports/event-store.js';
import type { HandedOffJob } from '../domain/ports/ledger-store.js';

// What is asked of the key writer and what it answers, apart from the writer itself: the parts of
// the flush (key-states.ts, flush-decisions.ts) and the commands that build on it name these
// types without importing the writer that imports them.

export interface KeyCommand {
  readonly stream: string;
  readonly command: Command;
  /** Recorded with each event of the decision (who asked, from where). */
  readonly metadata?: JsonObject;
  /** The caller made the stream's name up just now (a job without a key and without a given id): it has no events yet. */
  readonly newStream?: true;
}

export interface Decided {
  readonly events: readonly KeyEvent[];
  /** The stream's revision after the decision (unchanged when it decided nothing). */
  readonly revision: StreamRevision | 'no_stream';
  /** Jobs this decision started by direct handoff, with what their worker needs to run them. */
  readonly handedOff?: readonly HandedOffJob[];
}

export type CommandResult = E.Either<DomainError, Decided>;

/** A stream's state at a revision. */
export interface Loaded {
  readonly state: KeyState;
  readonly revision: StreamRevision | 'no_stream';
}

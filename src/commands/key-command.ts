import type * as E from 'fp-ts/lib/Either.js';
import type { Command } from '../domain/commands.js';
import type { DomainError } from '../domain/errors.js';
import type { EventData, KeyEvent } from '../domain/events.js';
import type { KeyState } from '../domain/key-state.js';
import type { JsonObject, StreamRevision } from '../domain/ports/event-store.js';
import type { DispatchMessage, HandedOffJob } from '../domain/ports/ledger-store.js';

// What is asked of the key writer and what it answers, apart from the writer itself: the parts of
// the flush (key-states.ts, flush-decisions.ts) and the commands that build on it name these
// types without importing the writer that imports them.

export interface KeyCommand {
  readonly stream: string;
  readonly command: Command;
  /** Recorded with each event of the decision (who asked, from where). */
  readonly metadata?: JsonObject;
  /**
   * The stream is taken to have no events yet (a job without a key, named after an id made up
   * just now or a given id not recorded before): decided on as empty without reading it, its
   * expected revision refusing the append if that was wrong.
   */
  readonly newStream?: true;
  /**
   * Job ids of the command made up for it (random UUIDs), whose JobEnqueued need not be checked
   * for uniqueness: no one else can have enqueued them. Every other JobEnqueued id (uuidv5 of a
   * job id someone gave) is unique in the store: enqueuing the id again records nothing new.
   */
  readonly madeUpJobIds?: ReadonlySet<string>;
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

/** A job a worker asked the writer to read and start: what its row said, and its JobStarted. */
export interface StartedJob {
  readonly stream: string;
  readonly message: DispatchMessage;
  readonly started: EventData<'JobStarted'>;
}

export interface ReadAndStart {
  readonly queue: string;
  /** How many to read, asked when the flush starts (the worker's free slots then). */
  readonly qty: () => number;
  readonly workerId: string;
  readonly metadata?: JsonObject;
}

export interface ReadStarted {
  /** Jobs claimed (started or not): fewer than asked means the queue had no more to claim. */
  readonly read: number;
  readonly started: readonly StartedJob[];
}

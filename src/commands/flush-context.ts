import type { RefusedError } from '../domain/errors.js';
import type { Command } from '../domain/commands.js';
import type { DispatchMessage, LedgerStore } from '../domain/ports/ledger-store.js';
import type { Logger } from '../domain/ports/logger.js';
import type { Outages } from '../domain/ports/outages.js';
import type { FillLater } from '../domain/decide/index.js';
import { KEY_STREAM_PREFIX } from '../domain/streams.js';
import type { PassOver } from './pass-over.js';
import type { CommandResult, KeyCommand, ReadAndStart, ReadStarted } from './key-command.js';
import type { KeyStates } from './key-states.js';
import type { ResolvedKeyWriterOptions } from './key-writer-options.js';

// What a flush works with: the submissions and reads it takes, the outcomes that send it round
// again, and the writer's parts it shares (FlushContext). The writer (./key-writer.ts) queues and
// schedules; a flush (./flush.ts, ./flush-attempt.ts) writes.

export interface Submission {
  readonly items: readonly KeyCommand[];
  /** A refusal of any item refuses them all (RefusedError): nothing of the submission is written. */
  readonly atomic: boolean;
  readonly resolve: (results: CommandResult[]) => void;
  readonly reject: (error: unknown) => void;
  attempts: number;
}

/** A decision needs streams the flush did not lock: the flush runs again, with them or without the submission. */
export class StreamsMissing extends Error {
  constructor(
    readonly submission: Submission,
    readonly item: KeyCommand,
    readonly streams: readonly string[],
  ) {
    super(`the decision needs streams ${streams.join(', ')} the flush did not lock`);
  }
}

/** A submission's decision needs a stream that cannot be read (quarantined): it fails with that stream's error, the flush runs again without it. */
export class SubmissionUnreadable extends Error {
  constructor(
    readonly submission: Submission,
    override readonly cause: unknown,
  ) {
    super('the decision needs a stream that cannot be read');
  }
}

/** An atomic submission had a command refused: the flush runs again without it. */
export class SubmissionRefused extends Error {
  constructor(
    readonly submission: Submission,
    readonly refusal: RefusedError,
  ) {
    super(refusal.message);
  }
}

export interface Read {
  readonly request: ReadAndStart;
  readonly resolve: (result: ReadStarted) => void;
  readonly reject: (error: unknown) => void;
}

/** A Start the flush makes of a job it claimed. */
export interface ReadItem extends KeyCommand {
  readonly read: Read;
  readonly message: DispatchMessage;
}

/** The key writer's parts a flush shares with it and with the flushes beside it. */
export interface FlushContext {
  readonly store: LedgerStore;
  readonly states: KeyStates;
  readonly log: Logger;
  readonly outages: Outages;
  readonly clock: () => number;
  readonly random: () => number;
  readonly options: ResolvedKeyWriterOptions;
  /** Streams a flush in flight decides on: no other flush may touch their states meanwhile. */
  readonly busy: Set<string>;
  /** Streams a decision of the command needed and its plan missed: planned with it from then on. */
  readonly learned: WeakMap<KeyCommand, Set<string>>;
  /** Event ids given to each item's events in the last attempt, to find whose event id was a duplicate. */
  readonly lastIds: WeakMap<KeyCommand, string[]>;
  /** Streams this writer found quarantined: logged as an error the first time only. */
  readonly quarantined: Set<string>;
  /** Jobs this writer's reads pass over for a while: it claimed them and could not start them. */
  readonly passOver: PassOver;
  /** Every stream the command decides on, as planned. */
  streamsOf(item: KeyCommand): readonly string[];
  /** Plans the command's streams again (its own, those the states suggest, those it was found to need). */
  plan(item: KeyCommand): readonly string[];
  /** Puts a submission back in front of the queue: it must still be decided before those that came after it. */
  putFirst(submission: Submission): void;
  /** Puts back submissions a flush postponed (failing those out of attempts). */
  requeue(postponed: readonly Submission[]): void;
  /** Serves a line that reached jobs under further limits in a flush of its own. */
  fillLater(stream: string, fill: FillLater): void;
}

/** The streams a submission's commands name. */
export const submissionStreams = (s: Submission): string[] => [...new Set(s.items.map((i) => i.stream))];

/** The fields every log line about a command carries: key (or stream), jobId, leaseId. */
export const logFields = (stream: string, command: Command) => ({
  ...(stream.startsWith(KEY_STREAM_PREFIX) ? { key: stream.slice(KEY_STREAM_PREFIX.length) } : { stream }),
  command: command.type,
  ...('jobId' in command && command.jobId !== undefined ? { jobId: command.jobId } : {}),
  ...('leaseId' in command ? { leaseId: command.leaseId } : {}),
});

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

import * as E from 'fp-ts/lib/Either.js';
import { decodeCommand, type Command } from '../domain/commands.js';
import { decideInPlace } from '../domain/decide/index.js';
import { describeDomainError, type DomainError } from '../domain/errors.js';
import type { KeyEvent } from '../domain/events.js';
import { Scratch, type Draft } from '../domain/key-state.js';
import {
  WrongExpectedRevisionError,
  type EventStore,
  type EventToAppend,
  type JsonObject,
  type SnapshotStore,
  type StreamAppend,
  type StreamRevision,
} from '../domain/ports/event-store.js';
import { silentLogger, type Logger } from '../domain/ports/logger.js';
import { KEY_STREAM_PREFIX } from '../domain/streams.js';
import { ValidationError } from '../domain/values.js';
import { KeyStateLoader, type Loaded } from './key-state-loader.js';

export interface KeyCommand {
  readonly stream: string;
  readonly command: Command;
  /** Recorded with each event of the decision (who asked, from where). */
  readonly metadata?: JsonObject;
}

export interface Decided {
  readonly events: readonly KeyEvent[];
  /** The stream's revision after the decision (unchanged when it decided nothing). */
  readonly revision: StreamRevision | 'no_stream';
}

export type CommandResult = E.Either<DomainError, Decided>;

export interface KeyCommandHandlerDeps {
  readonly store: EventStore;
  readonly snapshots?: SnapshotStore;
  /** Epoch ms. Injected so tests and the domain never read the wall clock themselves. */
  readonly clock?: () => number;
  /** [0, 1): draws the jitter of retries and of conflict back-off. */
  readonly random?: () => number;
  readonly logger?: Logger;
}

export interface KeyCommandHandlerOptions {
  /** Save a snapshot each time a stream passes a multiple of this many events; 0 disables. */
  readonly snapshotEvery?: number;
  /** Attempts after the first when an append conflicts with another writer. */
  readonly maxConflictRetries?: number;
  /** Streams whose (state, revision) stay cached in this process. */
  readonly cacheSize?: number;
  /** Maps a decided event to its id in the store; a random one when it returns undefined. */
  readonly eventId?: (stream: string, event: KeyEvent) => string | undefined;
}

/** A command could not be appended after every conflict retry: the stream is too contended. */
export class ConflictRetriesExhaustedError extends Error {
  override readonly name = 'ConflictRetriesExhaustedError';
  constructor(
    readonly streams: readonly string[],
    readonly attempts: number,
    options?: ErrorOptions,
  ) {
    super(`gave up after ${attempts} conflicting appends to ${streams.join(', ')}`, options);
  }
}

/**
 * The application side of the key decider: load state -> decide -> append with the expected
 * revision -> on a conflict re-read the delta and decide again. The expected revision is what
 * keeps every limit: two writers deciding on the same revision cannot both append, so the loser
 * re-decides against the winner's events (FAILURE-MODES #1, #6, #15).
 */
export class KeyCommandHandler {
  private readonly clock: () => number;
  private readonly random: () => number;
  private readonly log: Logger;
  private readonly maxConflictRetries: number;
  private readonly loader: KeyStateLoader;

  constructor(
    private readonly deps: KeyCommandHandlerDeps,
    private readonly options: KeyCommandHandlerOptions = {},
  ) {
    this.clock = deps.clock ?? Date.now;
    this.random = deps.random ?? Math.random;
    this.log = deps.logger ?? silentLogger;
    this.maxConflictRetries = options.maxConflictRetries ?? 50;
    this.loader = new KeyStateLoader(deps.store, {
      snapshots: deps.snapshots,
      snapshotEvery: options.snapshotEvery ?? 1_000,
      cacheSize: options.cacheSize ?? 10_000,
      logger: this.log,
    });
  }

  /** The key's current state and revision (snapshot + delta, cached). */
  load(stream: string): Promise<Loaded> {
    return this.loader.load(stream);
  }

  async execute(stream: string, command: Command, metadata?: JsonObject): Promise<CommandResult> {
    const [result] = await this.executeMany([{ stream, command, metadata }]);
    return result as CommandResult;
  }

  /**
   * Decides every command and appends in ONE transaction: one append per stream, each with its
   * own expected revision, all or nothing. Commands on the same stream are decided in order, each
   * seeing the events of the ones before. A refused command writes nothing and does not stop
   * the others. Throws ValidationError (naming the field) before anything is read or written.
   */
  async executeMany(items: readonly KeyCommand[]): Promise<CommandResult[]> {
    items.forEach((item, i) => {
      const decoded = decodeCommand(item.command);
      if (E.isLeft(decoded)) {
        const prefix = items.length > 1 ? `commands[${i}].` : '';
        throw new ValidationError(prefix + decoded.left.field, decoded.left.problem);
      }
    });
    const streams = [...new Set(items.map((i) => i.stream))];
    for (let attempt = 0; ; attempt++) {
      const loaded = await this.loader.loadMany(streams);
      const now = this.clock();
      const { results, appends, decided } = this.decideAll(items, loaded, now);
      if (appends.length === 0) return results;
      try {
        const written = await this.deps.store.appendMany(appends);
        for (const w of written) {
          const { state, revision: before } = loaded.get(w.stream)!;
          await this.loader.remember(w.stream, state, decided.get(w.stream)!, before, w.nextExpectedRevision);
        }
        const revisions = new Map(written.map((w) => [w.stream, w.nextExpectedRevision]));
        results.forEach((r, i) => {
          if (E.isRight(r) && r.right.events.length > 0) {
            const { stream, command } = items[i]!;
            this.log.debug({ ...logFields(stream, command), revision: revisions.get(stream), events: r.right.events.map((e) => e.type) }, 'command appended');
          }
        });
        return results.map((r, i) => E.map((d: Decided) => ({ ...d, revision: revisions.get(items[i]!.stream) ?? d.revision }))(r));
      } catch (error) {
        if (!(error instanceof WrongExpectedRevisionError)) throw error;
        if (attempt >= this.maxConflictRetries) {
          throw new ConflictRetriesExhaustedError(streams, attempt + 1, { cause: error });
        }
        this.log.debug({ stream: error.stream, expected: error.expected, actual: error.actual, attempt }, 'append conflicted; deciding again');
        await sleep(Math.min(50, 2 ** Math.min(attempt, 6)) * this.random());
      }
    }
  }

  /**
   * Decides in order, each command seeing the events of those before it on its stream: they are
   * applied to the loaded state in place (a Scratch), which is put back before this returns. It
   * MUST stay synchronous: no other caller may see the state while it is changed.
   */
  private decideAll(items: readonly KeyCommand[], loaded: ReadonlyMap<string, Loaded>, now: number) {
    const scratches = new Map<string, Scratch>();
    const decided = new Map<string, KeyEvent[]>();
    const pending = new Map<string, EventToAppend[]>();
    let results: CommandResult[];
    try {
      results = items.map(({ stream, command, metadata }) => {
        const state = loaded.get(stream)!.state;
        const decision = decideInPlace(command, state, now);
        if (E.isLeft(decision)) {
          this.log.info({ ...logFields(stream, command), refusal: decision.left.tag }, describeDomainError(decision.left));
          return decision;
        }
        const events = decision.right;
        const scratch = scratches.get(stream) ?? new Scratch(state as Draft);
        scratches.set(stream, scratch);
        for (const event of events) scratch.apply(event);
        decided.set(stream, [...(decided.get(stream) ?? []), ...events]);
        const list = pending.get(stream) ?? [];
        for (const event of events) list.push(this.toStored(stream, event, metadata));
        pending.set(stream, list);
        return E.right({ events, revision: loaded.get(stream)!.revision });
      });
    } finally {
      for (const scratch of scratches.values()) scratch.rollback();
    }
    const appends: StreamAppend[] = [...pending]
      .filter(([, events]) => events.length > 0)
      .map(([stream, events]) => {
        const revision = loaded.get(stream)!.revision;
        return { stream, expected: revision, events };
      });
    return { results, appends, decided };
  }

  private toStored(stream: string, event: KeyEvent, metadata: JsonObject | undefined): EventToAppend {
    const eventId = this.options.eventId?.(stream, event);
    return {
      type: event.type,
      data: event.data,
      ...(metadata ? { metadata } : {}),
      ...(eventId ? { eventId } : {}),
    };
  }
}

/** The fields every log line about a command carries: key (or stream), jobId, leaseId. */
const logFields = (stream: string, command: Command) => ({
  ...(stream.startsWith(KEY_STREAM_PREFIX) ? { key: stream.slice(KEY_STREAM_PREFIX.length) } : { stream }),
  command: command.type,
  ...('jobId' in command && command.jobId !== undefined ? { jobId: command.jobId } : {}),
  ...('leaseId' in command ? { leaseId: command.leaseId } : {}),
});

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

import * as E from 'fp-ts/lib/Either.js';
import { reconnectDelayMs } from '../domain/backoff.js';
import { decodeCommand, type Command } from '../domain/commands.js';
import type { FillLater } from '../domain/decide/index.js';
import { RefusedError, describeDomainError } from '../domain/errors.js';
import type { EventData, KeyEvent } from '../domain/events.js';
import { KEY_STATE_SCHEMA_VERSION, KeyStateCodec, Scratch, apply, draftOf, initialKeyState } from '../domain/key-state.js';
import { DuplicateEventIdError, type EventStore, type JsonObject, type SnapshotStore, type StreamRevision } from '../domain/ports/event-store.js';
import {
  CommitOutcomeUnknownError,
  StaleStateError,
  TransientWriteError,
  type EventProbe,
  type DecidedAppend,
  type DispatchMessage,
  type HandedOffJob,
  type LedgerStore,
  type LockedStream,
  type ReceivedMessage,
  type WriteTransaction,
} from '../domain/ports/ledger-store.js';
import { silentLogger, type Logger } from '../domain/ports/logger.js';
import { noOutages, type Outages } from '../domain/ports/outages.js';
import { EventDecodeError, decodeRecorded } from '../domain/recorded.js';
import { KEY_STREAM_PREFIX, streamFor } from '../domain/streams.js';
import { ValidationError } from '../domain/values.js';
import { FlushDecisions, UnreadableStream } from './flush-decisions.js';
import type { CommandResult, Decided, KeyCommand, Loaded } from './key-command.js';
import { KeyStates, next, type Entry } from './key-states.js';

// The key writer: the ONE owner of key states in a process, and the one door for every write
// (enqueue, the worker's start/complete/fail/renew/yield, the sweeper, operators). Its cycle:
//
//   submit ──► pending ──► flush: one transaction for everything that arrived meanwhile
//                            read    the dispatch messages workers asked for (each a Start)
//                            lock    every stream the flush decides on, in one order
//                                    (LockedStream: its revision, the events after ours)
//                            catch up fold those events into our state (a snapshot first when
//                                    ours is older); a stream a younger transaction wrote
//                                    last waits for the next flush (deferred)
//                            decide  each command in order, in place (decideAcross: a Scratch
//                                    journals every change; ./flush-decisions.ts, which also
//                                    makes the appends), on every stream it touches: a job
//                                    under further limits is decided on its limit keys too
//                                    (streamsOf: guessed from the states before the lock; a
//                                    decision that needs one more stream runs the flush again
//                                    with it, all locked in one round, so never a deadlock)
//                            commit  one set-based append per stream, each expecting the
//                                    revision it was locked at, plus the inline projections
//                          ──► remember: the decided state is the state at the new revision
//                              (./key-states.ts: the cache of states, catch-up, LRU)
//                          ──► a line that reached jobs whose streams the flush did not have is
//                              served by a FillSlots of its own (the sweeper's fillStranded
//                              does it again after a crash)
//                          ──► a stream with an event that does not decode is quarantined
//                              (jl_quarantined, in the same commit): its commands fail, its
//                              messages wait hidden, the rest of the flush goes on
//                          ──► on failure: roll the Scratches back (the state is again the
//                              locked one), and run the flush again; a failure that is not
//                              transient is isolated to the submission that caused it
//
// The expected revision checked in the same statement that appends is what keeps every limit:
// the lock only makes a conflict rare, the check makes one impossible to write around
// (FAILURE-MODES #1, #6, #15). Guarded by: decideIntoDecidesTheSame and
// parkedIndexFollowsInPlaceChanges (test/domain/invariants.unit.test.ts) for decide and roll back;
// test/commands/key-writer.int.test.ts for the flush (concurrent writers and processes, deferred
// streams, a batch that does not fail as a whole); test/commands/quarantine.int.test.ts for an
// undecodable event.

/** A job a worker asked the writer to read and start: its message and its JobStarted. */
export interface StartedJob {
  readonly msgId: string;
  readonly stream: string;
  readonly message: DispatchMessage;
  readonly started: EventData<'JobStarted'>;
}

export interface ReadAndStart {
  readonly queue: string;
  readonly vtMs: number;
  /** How many to read, asked when the flush starts (the worker's free slots then). */
  readonly qty: () => number;
  readonly workerId: string;
  readonly metadata?: JsonObject;
}

export interface ReadStarted {
  /** Messages read (started or not): fewer than asked means the queue had no more visible. */
  readonly read: number;
  readonly started: readonly StartedJob[];
}

export interface KeyWriterOptions {
  /** Epoch ms. Injected so tests and the domain never read the wall clock themselves. */
  readonly clock?: () => number;
  /** [0, 1): the jitter of the back-off between attempts of a flush. */
  readonly random?: () => number;
  readonly logger?: Logger;
  /** Save a snapshot each time a stream passes a multiple of this many events; 0 disables. */
  readonly snapshotEvery?: number;
  /** Transactions a submission may take (conflicts, deferrals, transient failures) before it fails. */
  readonly maxAttempts?: number;
  /** Streams whose states stay cached in this process. */
  readonly cacheSize?: number;
  /** Commands per flush at most (a submission is never split; one larger than this is a flush of its own). */
  readonly maxFlushCommands?: number;
  /** Flushes in flight at once, on disjoint streams (each on a connection of its own). */
  readonly maxConcurrentFlushes?: number;
  /** Maps a decided event to its id in the store; a random one when it returns undefined. */
  readonly eventId?: (stream: string, event: KeyEvent) => string | undefined;
  /** Where load() starts from (writes save snapshots through the flush itself). */
  readonly snapshots?: SnapshotStore;
  /**
   * How long the dispatch message of a quarantined stream (one with an event that does not
   * decode) stays hidden before a flush reads it again: it waits for the stream to be fixed,
   * neither lost nor read over and over.
   */
  readonly quarantinedMessageDelayMs?: number;
  /** Told of failures the database's absence explains, and of its answering again (one log line each, there). */
  readonly outages?: Outages;
  /**
   * How long a submission waits for a database that does not answer (a restart, a failover)
   * before it fails with the connection's error. Waiting costs no attempts: an outage is not a
   * conflict. A worker's completion recorded after the outage keeps the job from running twice.
   */
  readonly outageWaitMs?: number;
}

export const KEY_WRITER_DEFAULTS = {
  snapshotEvery: 1_000,
  maxAttempts: 50,
  cacheSize: 10_000,
  maxFlushCommands: 5_000,
  maxConcurrentFlushes: 2,
  quarantinedMessageDelayMs: 30_000,
  outageWaitMs: 120_000,
} as const;

/** A submission could not be written after every attempt: its streams are too contended (or kept failing). */
export class ConflictRetriesExhaustedError extends Error {
  override readonly name = 'ConflictRetriesExhaustedError';
  constructor(
    readonly streams: readonly string[],
    readonly attempts: number,
    options?: ErrorOptions,
  ) {
    super(`gave up after ${attempts} attempts to write ${streams.join(', ')}`, options);
  }
}

interface Submission {
  readonly items: readonly KeyCommand[];
  /** A refusal of any item refuses them all (RefusedError): nothing of the submission is written. */
  readonly atomic: boolean;
  readonly resolve: (results: CommandResult[]) => void;
  readonly reject: (error: unknown) => void;
  attempts: number;
}

/** A decision needs streams the flush did not lock: the flush runs again, with them or without the submission. */
class StreamsMissing extends Error {
  constructor(
    readonly submission: Submission,
    readonly item: KeyCommand,
    readonly streams: readonly string[],
  ) {
    super(`the decision needs streams ${streams.join(', ')} the flush did not lock`);
  }
}

/** A submission's decision needs a stream that cannot be read (quarantined): it fails with that stream's error, the flush runs again without it. */
class SubmissionUnreadable extends Error {
  constructor(
    readonly submission: Submission,
    override readonly cause: unknown,
  ) {
    super('the decision needs a stream that cannot be read');
  }
}

/** An atomic submission had a command refused: the flush runs again without it. */
class SubmissionRefused extends Error {
  constructor(
    readonly submission: Submission,
    readonly refusal: RefusedError,
  ) {
    super(refusal.message);
  }
}

interface Read {
  readonly request: ReadAndStart;
  readonly resolve: (result: ReadStarted) => void;
  readonly reject: (error: unknown) => void;
}

/** A Start the flush makes of a message it read. */
interface ReadItem extends KeyCommand {
  readonly read: Read;
  readonly msgId: string;
  readonly message: DispatchMessage;
}

/**
 * Group commit for every key of the process: whatever is submitted while a flush is in flight
 * goes into the next one, so an idle writer writes a command at once and a busy one writes
 * hundreds per transaction, each stream with its own expected revision.
 */
export class KeyWriter {
  private readonly clock: () => number;
  private readonly random: () => number;
  private readonly log: Logger;
  private readonly outages: Outages;
  private readonly options: Required<Pick<KeyWriterOptions, 'snapshotEvery' | 'maxAttempts' | 'maxFlushCommands' | 'maxConcurrentFlushes' | 'quarantinedMessageDelayMs' | 'outageWaitMs'>> & KeyWriterOptions;
  /** Streams this writer found quarantined: logged as an error the first time only. */
  private readonly quarantined = new Set<string>();
  private readonly states: KeyStates;
  private submissions: Submission[] = [];
  private reads: Read[] = [];
  /** Flushes in flight, each on streams no other one touches. */
  private readonly inFlight = new Set<Promise<void>>();
  /** Streams a flush in flight decides on: no other flush may touch their states meanwhile. */
  private readonly busy = new Set<string>();
  private scheduled = false;
  /** Every stream each submitted command decides on, as take() planned it (see streamsOf). */
  private readonly planned = new WeakMap<KeyCommand, readonly string[]>();
  /** Streams a decision of the command needed and its plan missed: planned with it from then on. */
  private readonly learned = new WeakMap<KeyCommand, Set<string>>();
  /** FillSlots submitted and not yet written, by stream and place: the same one is not asked twice. */
  private readonly filling = new Set<string>();

  constructor(
    private readonly store: LedgerStore,
    private readonly events: EventStore,
    options: KeyWriterOptions = {},
  ) {
    this.clock = options.clock ?? Date.now;
    this.random = options.random ?? Math.random;
    this.log = options.logger ?? silentLogger;
    this.outages = options.outages ?? noOutages;
    this.options = { ...KEY_WRITER_DEFAULTS, ...options };
    this.states = new KeyStates(options.cacheSize ?? KEY_WRITER_DEFAULTS.cacheSize, events, this.log);
  }

  execute(stream: string, command: Command, metadata?: JsonObject): Promise<CommandResult> {
    return this.executeMany([{ stream, command, ...(metadata ? { metadata } : {}) }]).then((r) => r[0]!);
  }

  /**
   * Decides every command and appends them in ONE transaction: one append per stream, each with
   * its own expected revision, all or nothing. Commands on the same stream are decided in order,
   * each seeing the events of the ones before (and of every earlier submission). A refused command
   * writes nothing and does not stop the others, unless `atomic`: then one refusal rejects the
   * whole submission with RefusedError (naming the stream) and none of it is written. Throws
   * ValidationError (naming the field) before anything is read or written.
   */
  executeMany(items: readonly KeyCommand[], { atomic = false }: { readonly atomic?: boolean } = {}): Promise<CommandResult[]> {
    items.forEach((item, i) => {
      const decoded = decodeCommand(item.command);
      if (E.isLeft(decoded)) {
        const prefix = items.length > 1 ? `commands[${i}].` : '';
        throw new ValidationError(prefix + decoded.left.field, decoded.left.problem);
      }
    });
    if (items.length === 0) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      this.submissions.push({ items, atomic, resolve, reject, attempts: 0 });
      this.schedule();
    });
  }

  /** Reads up to `qty()` messages of a queue in the next flush and starts them for `workerId`, in the same transaction. */
  readAndStart(request: ReadAndStart): Promise<ReadStarted> {
    return new Promise((resolve, reject) => {
      this.reads.push({ request, resolve, reject });
      this.schedule();
    });
  }

  /** Resolves once everything submitted so far is written (or has failed). */
  async drain(): Promise<void> {
    while (this.inFlight.size > 0 || this.scheduled) await (this.inFlight.size > 0 ? Promise.all(this.inFlight) : new Promise((r) => setImmediate(r)));
  }

  // Flushes start on the next turn of the event loop, so every command submitted in the same turn
  // (a worker's handlers that all finished at once) goes into one transaction; and after a flush
  // ends, on the turn after, so what its results woke (handlers, their completions) goes into the
  // next. Up to maxConcurrentFlushes run at once on disjoint streams: a command arriving during a
  // flush waits for it only if it names one of its streams.
  private schedule(): void {
    if (this.scheduled || this.inFlight.size >= this.options.maxConcurrentFlushes) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      while (this.inFlight.size < this.options.maxConcurrentFlushes) {
        const next = this.take();
        if (next === undefined) return;
        const streams = new Set(next.batch.flatMap((s) => s.items.flatMap((i) => this.streamsOf(i))));
        for (const stream of streams) this.busy.add(stream);
        const flight: Promise<void> = this.flush(next.batch, next.reads, streams).finally(() => {
          for (const stream of streams) this.busy.delete(stream);
          this.inFlight.delete(flight);
          this.states.trim(this.busy);
          this.schedule();
        });
        this.inFlight.add(flight);
      }
    });
  }

  /**
   * What the next flush takes: every read, and the submissions in order that touch no stream of
   * a flush in flight (nor of a submission passed over, which would otherwise be overtaken).
   */
  private take(): { batch: Submission[]; reads: Read[] } | undefined {
    const reads = this.reads.splice(0);
    const batch: Submission[] = [];
    const waiting: Submission[] = [];
    const blocked = new Set(this.busy);
    let commands = 0;
    for (const s of this.submissions) {
      const full = batch.length > 0 && commands + s.items.length > this.options.maxFlushCommands;
      // Planned once (and again only when a decision found it needs more): a submission waiting
      // behind a busy stream is looked at by every take, and its guess only has to be a good one.
      const streams = s.items.flatMap((i) => this.planned.get(i) ?? this.plan(i));
      if (full || streams.some((stream) => blocked.has(stream))) {
        waiting.push(s);
        for (const stream of streams) blocked.add(stream);
        continue;
      }
      batch.push(s);
      commands += s.items.length;
    }
    this.submissions = waiting;
    return batch.length === 0 && reads.length === 0 ? undefined : { batch, reads };
  }

  /** Plans every stream the command decides on: its own, those the states suggest, those it was found to need. */
  private plan(item: KeyCommand): readonly string[] {
    const streams = [...new Set([item.stream, ...this.states.related(item), ...(this.learned.get(item) ?? [])])];
    this.planned.set(item, streams);
    return streams;
  }

  private streamsOf(item: KeyCommand): readonly string[] {
    return this.planned.get(item) ?? [item.stream];
  }

  /** One flush, retried while transient; a failure of anything else is pinned on the submission that caused it. */
  private async flush(batch: Submission[], reads: Read[], streams: Set<string>): Promise<void> {
    let optimistic = true;
    let outage: { readonly since: number; tries: number } | undefined;
    for (;;) {
      const generation = this.outages.generation;
      try {
        const postponed = await this.attempt(batch, reads, optimistic, streams);
        if (outage !== undefined) this.outages.answered();
        this.requeue(postponed);
        return;
      } catch (error) {
        if (error instanceof StaleStateError && optimistic) {
          optimistic = false;
          continue;
        }
        if (this.outages.failed(error, generation)) {
          // The database is away: wait for it (quietly: the outage is logged once, by whoever
          // watches), then decide again on what the streams hold by then.
          optimistic = false;
          outage ??= { since: this.clock(), tries: 0 };
          if (this.clock() - outage.since < this.options.outageWaitMs) {
            await sleep(reconnectDelayMs(++outage.tries, this.random()));
            continue;
          }
          for (const s of batch) s.reject(error);
          for (const r of reads) r.reject(error);
          return;
        }
        // A stale state after locking: a stream decided on unlocked (a queue cap taken to be absent) moved; decided again, locked.
        if (error instanceof TransientWriteError || error instanceof StaleStateError) {
          // The states may be what failed (a stream another writer just created): lock first from now on.
          optimistic = false;
          for (const s of batch) s.attempts++;
          const exhausted = batch.filter((s) => s.attempts >= this.options.maxAttempts);
          for (const s of exhausted) s.reject(new ConflictRetriesExhaustedError(streamsOf(s), s.attempts, { cause: error }));
          batch = batch.filter((s) => !exhausted.includes(s));
          this.log.debug({ err: error }, 'flush failed for a transient reason; running it again');
          await sleep(Math.min(50, 2 ** Math.min(batch[0]?.attempts ?? 1, 6)) * this.random());
          if (batch.length === 0 && reads.length === 0) return;
          continue;
        }
        if (error instanceof StreamsMissing) {
          // Decided again with them, locked in the same round as the rest: in this flush when no
          // other flush in flight has them, else in a later one (in front, so in order).
          const { submission } = error;
          const learned = this.learned.get(error.item) ?? new Set<string>();
          for (const stream of error.streams) learned.add(stream);
          this.learned.set(error.item, learned);
          optimistic = false;
          if (++submission.attempts >= this.options.maxAttempts) {
            submission.reject(new ConflictRetriesExhaustedError(streamsOf(submission), submission.attempts));
            batch = batch.filter((s) => s !== submission);
          } else if (error.streams.some((stream) => this.busy.has(stream) && !streams.has(stream))) {
            batch = batch.filter((s) => s !== submission);
            this.submissions.unshift(submission);
          } else {
            for (const item of submission.items) this.plan(item);
            for (const stream of error.streams) {
              streams.add(stream);
              this.busy.add(stream);
            }
          }
          if (batch.length === 0 && reads.length === 0) return;
          continue;
        }
        if (error instanceof SubmissionUnreadable) {
          // The others go again without it; it fails with why its stream cannot be read (a worker keeps its result and tries again).
          error.submission.reject(error.cause);
          batch = batch.filter((s) => s !== error.submission);
          if (batch.length === 0 && reads.length === 0) return;
          continue;
        }
        if (error instanceof SubmissionRefused) {
          // Its decisions were rolled back with the rest of the attempt; the others go again without it.
          error.submission.reject(error.refusal);
          batch = batch.filter((s) => s !== error.submission);
          if (batch.length === 0 && reads.length === 0) return;
          continue;
        }
        const culprit = error instanceof DuplicateEventIdError ? batch.find((s) => this.produces(s, error.eventId)) : undefined;
        if (culprit !== undefined) {
          culprit.reject(error);
          batch = batch.filter((s) => s !== culprit);
          continue;
        }
        if (batch.length + reads.length > 1) {
          // Something in the flush is broken for good (bad data, a bug): each part alone finds which.
          this.log.warn({ err: error, submissions: batch.length, reads: reads.length }, 'flush failed; writing its parts one by one');
          for (const s of batch) await this.flush([s], [], streams);
          for (const r of reads) await this.flush([], [r], streams);
          return;
        }
        for (const s of batch) s.reject(error);
        for (const r of reads) r.reject(error);
        return;
      }
    }
  }

  /** Whether an event is recorded, asking again (with a growing pause) while the database cannot answer. */
  private async landed(probe: EventProbe): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.store.recorded(probe);
      } catch (error) {
        if (attempt >= this.options.maxAttempts) throw error;
        await sleep(Math.min(1_000, 10 * 2 ** attempt));
      }
    }
  }

  /**
   * The jobs a landed flush whose COMMIT answer was lost started by direct handoff (a start of a
   * job admitted in the same append), read back: the answer would have carried them, and without
   * them their slots would sit idle until the leases expire. Past this point the flush MUST NOT
   * fail (it landed): a failed read leaves them to lease expiry.
   */
  private async handedOffIn(appends: readonly DecidedAppend[]): Promise<Map<string, HandedOffJob>> {
    const jobIds = appends.flatMap(({ decided = [] }) => {
      const admitted = new Set(decided.flatMap((e) => (e.type === 'SlotAcquired' || e.type === 'JobPromoted' ? [e.data.leaseId] : [])));
      return decided.flatMap((e) => (e.type === 'JobStarted' && admitted.has(e.data.leaseId) ? [e.data.jobId] : []));
    });
    if (jobIds.length === 0) return new Map();
    try {
      return new Map((await this.store.handedOffJobs(jobIds)).map((job) => [job.jobId, job]));
    } catch (error) {
      this.log.warn({ err: error, jobIds }, 'reading the handed-off jobs of a flush whose COMMIT answer was lost failed: they run again once their leases expire');
      return new Map();
    }
  }

  private produces(s: Submission, eventId: string | undefined): boolean {
    return eventId !== undefined && s.items.some((item) => this.lastIds.get(item)?.includes(eventId));
  }

  /** Event ids given to each item's events in the last attempt, to find whose event id was a duplicate. */
  private lastIds = new WeakMap<KeyCommand, string[]>();

  private requeue(postponed: readonly Submission[]): void {
    const failed = postponed.filter((s) => ++s.attempts >= this.options.maxAttempts);
    for (const s of failed) s.reject(new ConflictRetriesExhaustedError(streamsOf(s), s.attempts));
    // In front: a postponed submission must still be decided before those that came after it.
    this.submissions.unshift(...postponed.filter((s) => !failed.includes(s)));
  }

  /** One transaction. Resolves the submissions it wrote; returns those it had to postpone. */
  private async attempt(batch: readonly Submission[], reads: readonly Read[], optimistic: boolean, mine: Set<string>): Promise<Submission[]> {
    const tx = await this.store.begin();
    const scratches = new Map<string, Scratch>();
    try {
      const { items: read, counts, malformed } = await this.readMessages(tx, reads);
      // A message of a stream another flush in flight decides on waits for a later flush (released).
      const elsewhere = read.filter((i) => this.busy.has(i.stream) && !mine.has(i.stream));
      const readItems = read.filter((i) => !elsewhere.includes(i));
      for (const i of readItems) {
        mine.add(i.stream);
        this.busy.add(i.stream);
      }
      const items = [...batch.flatMap((s) => s.items), ...readItems];
      if (items.length === 0) {
        await tx.commit({ appends: [], archive: malformed, release: elsewhere.map((i) => i.msgId) });
        for (const r of reads) r.resolve({ read: counts.get(r) ?? 0, started: [] });
        return [];
      }
      const streams = [...new Set(items.flatMap((i) => this.streamsOf(i)))];
      const broken = new Map<string, unknown>();
      const entries = new Map<string, Entry>();
      // When this writer wrote every stream last (or just made it up), it decides on the states it
      // has and locks in the same round trip as it writes: the expected revision in the append
      // refuses the write if that was wrong (StaleStateError), and the flush runs again, locking first.
      optimistic &&= reads.length === 0 && items.every((i) => this.streamsOf(i).every((stream) => this.states.current(stream, stream === i.stream && i.newStream === true) !== undefined));
      let locked: ReadonlyMap<string, LockedStream>;
      if (optimistic) {
        locked = new Map(streams.map((stream) => [stream, { stream, revision: this.states.revision(stream), snapshot: undefined, events: [], deferred: false }]));
        for (const stream of streams) entries.set(stream, this.states.entry(stream));
      } else {
        locked = await tx.lock(streams.map((stream) => ({ stream, after: this.states.revision(stream) })));
        for (const l of locked.values()) {
          try {
            entries.set(l.stream, await this.states.catchUp(l));
            this.quarantined.delete(l.stream);
          } catch (error) {
            broken.set(l.stream, error);
            this.noteBroken(l.stream, error);
          }
        }
      }
      const waits = (s: readonly KeyCommand[]) => s.some((i) => this.streamsOf(i).some((stream) => locked.get(stream)!.deferred));
      // A command fails with its own stream's break. A broken stream it only may read is left out:
      // its decision serves what it can without it (a line waiting on it is served later), and
      // fails only if it truly needs that stream (FlushDecisions: UnreadableStream). Failing on
      // any planned stream let one quarantined limit key stall every key whose line reached it,
      // and drop the results recorded on them (issue 21, item 3).
      const fails = (s: readonly KeyCommand[]) => s.map((i) => i.stream).find((stream) => broken.has(stream));
      const postponed = batch.filter((s) => waits(s.items));
      const failed = batch.filter((s) => !waits(s.items) && fails(s.items) !== undefined);
      const going = batch.filter((s) => !postponed.includes(s) && !failed.includes(s));
      const release = [...elsewhere, ...readItems.filter((i) => waits([i]))].map((i) => i.msgId);
      // A message of a stream that cannot be read waits (hidden) for the stream to be fixed; the others start.
      const delayed = readItems.filter((i) => !waits([i]) && broken.has(i.stream)).map((i) => i.msgId);
      const readGoing = readItems.filter((i) => !waits([i]) && !broken.has(i.stream));
      const quarantine = [...broken.values()].filter((e): e is EventDecodeError => e instanceof EventDecodeError);

      const decisions = new FlushDecisions({
        entries,
        scratches,
        broken,
        absent: (stream) => this.states.absent(stream),
        now: this.clock(),
        eventId: this.options.eventId,
        refused: (item, refusal) => this.log.info({ ...logFields(item.stream, item.command), refusal: refusal.tag }, describeDomainError(refusal)),
      });
      const { decided } = decisions;
      for (const s of going) {
        for (const item of s.items) {
          try {
            decisions.decide(item, (streams) => { throw new StreamsMissing(s, item, streams); });
          } catch (error) {
            throw error instanceof UnreadableStream ? new SubmissionUnreadable(s, error.cause) : error;
          }
        }
      }
      for (const item of readGoing) decisions.decide(item, (streams) => { throw new Error(`a Start on ${item.stream} needs streams ${streams.join(', ')}`); });
      for (const [item, ids] of decisions.eventIds) this.lastIds.set(item, ids);

      // A refusal, or a decision to do nothing, writes nothing for the expected revision to check:
      // made on a state that may be stale (optimistic), it is not an answer until the stream is read.
      if (optimistic && [...decided.values()].some((d) => E.isLeft(d) || d.right.events.length === 0)) {
        throw new StaleStateError('a decision that writes nothing was made on a state not read in this transaction');
      }
      for (const sub of going) {
        const refused = sub.atomic ? sub.items.find((i) => E.isLeft(decided.get(i)!)) : undefined;
        const refusal = refused && decided.get(refused)!;
        if (refusal !== undefined && E.isLeft(refusal)) throw new SubmissionRefused(sub, new RefusedError(refusal.left, refused!.stream));
      }
      const archive = [...malformed, ...readGoing.filter((i) => E.isLeft(decided.get(i)!)).map((i) => i.msgId)];
      const { appends, snapshots, after } = decisions.appends(this.options.snapshotEvery);
      // Invariant 9: what a decision only read is checked at commit too. Locked streams cannot
      // move under this transaction; those decided on unlocked can: the states it trusted
      // (optimistic) and the queue caps it took to be absent.
      const readChecks = [
        ...(optimistic ? streams.filter((stream) => !after.has(stream)).map((stream) => ({ stream, revision: entries.get(stream)!.revision })) : []),
        ...[...decisions.readAbsent].map((stream) => ({ stream, revision: 'no_stream' as const })),
      ];
      const committed = await tx.commit({
        appends,
        archive,
        release,
        snapshots,
        ...(readChecks.length > 0 ? { readChecks } : {}),
        ...(delayed.length > 0 ? { delay: { msgIds: delayed, ms: this.options.quarantinedMessageDelayMs } } : {}),
        ...(quarantine.length > 0 ? { quarantine } : {}),
        ...(optimistic ? { lockFirst: streams } : {}),
      }).catch(async (error: unknown) => {
        if (!(error instanceof CommitOutcomeUnknownError)) throw error;
        // FAILURE-MODES #19: never guess. A commit is all or nothing, so one of its events says.
        const first = appends[0];
        if (first === undefined || !(await this.landed({ stream: first.stream, revision: next(first.expected as StreamRevision | 'no_stream'), eventId: first.events[0]!.eventId! }))) {
          throw new TransientWriteError(`COMMIT outcome unknown and nothing landed: ${error.message}`);
        }
        this.log.warn({ err: error }, 'the COMMIT answer was lost, but the flush had landed: reported as written');
        return { handedOff: await this.handedOffIn(appends), positionOf: () => undefined };
      });

      // Remember: the decided states are the states at the new revisions.
      for (const [stream, revision] of after) {
        entries.get(stream)!.revision = revision;
        this.states.wrote(stream);
      }
      const result = (item: KeyCommand): CommandResult =>
        E.map((d: Decided) => {
          const revision = after.get(item.stream) ?? d.revision;
          const handedOff = d.events.flatMap((e) => (e.type === 'JobStarted' ? [committed.handedOff.get(e.data.jobId)].filter((j) => j !== undefined) : []));
          return handedOff.length > 0 ? { ...d, revision, handedOff } : { ...d, revision };
        })(decided.get(item)!);
      for (const s of going) s.resolve(s.items.map(result));
      for (const [stream, fill] of decisions.fills) this.fillLater(stream, fill);
      for (const s of failed) s.reject(broken.get(fails(s.items)!));
      for (const r of reads) {
        const mine = readItems.filter((i) => i.read === r);
        const started = mine.flatMap((i): StartedJob[] => {
          const d = decided.get(i);
          const event = d !== undefined && E.isRight(d) ? d.right.events.find((e) => e.type === 'JobStarted') : undefined;
          return event?.type === 'JobStarted' ? [{ msgId: i.msgId, stream: i.stream, message: i.message, started: event.data }] : [];
        });
        r.resolve({ read: counts.get(r) ?? 0, started });
      }
      return postponed;
    } catch (error) {
      for (const scratch of scratches.values()) scratch.rollbackTo();
      await tx.rollback();
      if (error instanceof StaleStateError) {
        for (const stream of error.streams) this.states.moved(stream);
        for (const item of batch.flatMap((s) => s.items)) for (const stream of this.streamsOf(item)) this.states.moved(stream);
      }
      throw error;
    }
  }

  /**
   * The second step of a release whose key's line reached jobs under further limits that the
   * flush did not have the streams of: their turn is decided with those streams, in a flush of
   * its own. If this process dies first, the sweeper's fillStranded does it.
   */
  private fillLater(stream: string, { after, needs }: FillLater): void {
    // Tried even when this writer last found a stream it needs quarantined: that note may be stale
    // (fixed since, read by another process), and skipping left the line to a sweeper (with none
    // running, a job waited with every limit free: the model checker found it). While the stream
    // still does not decode, the FillSlots fails and the sweeper serves the line once it does.
    const pending = after === undefined ? stream : `${stream} ${after.priority} ${after.seq}`;
    if (this.filling.has(pending)) return;
    this.filling.add(pending);
    const command: Command = { type: 'FillSlots', ...(after === undefined ? {} : { after: { priority: after.priority, seq: after.seq } }) };
    const item: KeyCommand = { stream, command };
    // Planned with the streams the line was found to need, so the FillSlots has them at hand.
    this.learned.set(item, new Set(needs));
    this.executeMany([item])
      .catch((error: unknown) =>
        error instanceof EventDecodeError
          ? this.log.debug({ stream, unreadable: error.stream }, 'a line waits on a quarantined stream: the sweeper serves it once it decodes')
          : this.log.warn({ err: error, stream }, 'serving a line that waits on further limits failed: the sweeper serves it'),
      )
      .finally(() => this.filling.delete(pending));
  }

  /** A stream the flush could not bring up to date: its commands fail, its messages wait, the rest of the flush goes on. */
  private noteBroken(stream: string, error: unknown): void {
    if (!(error instanceof EventDecodeError)) {
      this.log.warn({ err: error, stream }, 'stream could not be brought up to date: its commands fail; the other streams go on');
      return;
    }
    // The error's message names the event's stream, revision and global position.
    if (this.quarantined.has(stream)) {
      this.log.debug({ err: error, stream }, 'stream still quarantined');
      return;
    }
    this.quarantined.add(stream);
    this.log.error({ err: error, stream }, 'stream quarantined: its commands are refused and its messages wait until it decodes again; the other streams go on');
  }

  /** The reads of the flush, each message a Start (a malformed one is archived and logged). */
  private async readMessages(tx: WriteTransaction, reads: readonly Read[]): Promise<{ items: ReadItem[]; counts: Map<Read, number>; malformed: string[] }> {
    const items: ReadItem[] = [];
    const counts = new Map<Read, number>();
    const malformed: string[] = [];
    const qty = new Map(reads.map((r) => [r, r.request.qty()]));
    const asked = reads.filter((r) => qty.get(r)! > 0);
    if (asked.length === 0) return { items, counts, malformed };
    const results = await tx.read(asked.map((r) => ({ queue: r.request.queue, vtMs: r.request.vtMs, qty: qty.get(r)! })));
    asked.forEach((read, i) => {
      const messages = results[i]!;
      counts.set(read, messages.length);
      for (const m of messages) {
        const message = dispatchMessage(m);
        if (message === undefined) {
          this.log.error({ msgId: m.msgId, queue: read.request.queue }, 'dispatch message is not one: archived unread');
          malformed.push(m.msgId);
          continue;
        }
        const { jobId, leaseId, key } = message;
        const command: Command = { type: 'Start', jobId, leaseId, workerId: read.request.workerId, msgId: m.msgId };
        items.push({ stream: streamFor(key, jobId), command, metadata: { workerId: read.request.workerId, ...read.request.metadata }, read, msgId: m.msgId, message });
      }
    });
    return { items, counts, malformed };
  }

  /**
   * The current state of a stream, the caller's to keep: read from the store (the newest snapshot
   * of this schema, then the events after it), not from this writer's states, which only a flush
   * may touch.
   */
  async load(stream: string): Promise<Loaded> {
    const entry: Entry = { state: draftOf(initialKeyState), revision: 'no_stream', shared: true };
    const snapshot = await this.options.snapshots?.load(stream);
    const decoded = snapshot?.schemaVersion === KEY_STATE_SCHEMA_VERSION ? KeyStateCodec.decode(snapshot.state) : undefined;
    if (decoded !== undefined && E.isRight(decoded)) {
      entry.state = draftOf(decoded.right);
      entry.revision = snapshot!.revision;
    }
    for (const recorded of await this.events.readStream(stream, { fromRevision: next(entry.revision) })) {
      apply(entry.state, decodeRecorded(recorded));
      entry.revision = recorded.revision;
    }
    return entry;
  }
}

const dispatchMessage = (m: ReceivedMessage): DispatchMessage | undefined => {
  const d = m.message as Partial<DispatchMessage> | null;
  const ok =
    typeof d === 'object' && d !== null && typeof d.jobId === 'string' && d.jobId !== '' && typeof d.leaseId === 'string' && d.leaseId !== '' &&
    (d.key === null || typeof d.key === 'string') && typeof d.name === 'string' && typeof d.attempt === 'number' && 'args' in d;
  return ok ? (d as DispatchMessage) : undefined;
};

const streamsOf = (s: Submission): string[] => [...new Set(s.items.map((i) => i.stream))];



/** The fields every log line about a command carries: key (or stream), jobId, leaseId. */
const logFields = (stream: string, command: Command) => ({
  ...(stream.startsWith(KEY_STREAM_PREFIX) ? { key: stream.slice(KEY_STREAM_PREFIX.length) } : { stream }),
  command: command.type,
  ...('jobId' in command && command.jobId !== undefined ? { jobId: command.jobId } : {}),
  ...('leaseId' in command ? { leaseId: command.leaseId } : {}),
});

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

import * as E from 'fp-ts/lib/Either.js';
import { decodeCommand, type Command } from '../domain/commands.js';
import type { FillLater } from '../domain/decide/index.js';
import { KEY_STATE_SCHEMA_VERSION, apply, draftOf, initialKeyState, snapshotState } from '../domain/key-state.js';
import type { EventStore, JsonObject } from '../domain/ports/event-store.js';
import type { LedgerStore } from '../domain/ports/ledger-store.js';
import { silentLogger } from '../domain/ports/logger.js';
import { noOutages } from '../domain/ports/outages.js';
import { EventDecodeError, decodeRecorded } from '../domain/recorded.js';
import { ValidationError } from '../domain/values.js';
import { submissionStreams, type FlushContext, type Read, type Submission } from './flush-context.js';
import { runFlush } from './flush.js';
import { PassOver } from './pass-over.js';
import type { CommandResult, KeyCommand, Loaded, ReadAndStart, ReadStarted } from './key-command.js';
import { KeyStates, next, type Entry } from './key-states.js';
import { LoadedStates } from './loaded-states.js';
import { ConflictRetriesExhaustedError, KEY_WRITER_DEFAULTS, type KeyWriterOptions } from './key-writer-options.js';

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
//
// The parts: ./key-command.ts (what is asked and answered), ./key-writer-options.ts, this file
// (queue, schedule, plan), ./flush.ts (one flush and what a failure leads to), ./flush-attempt.ts
// (one transaction), ./flush-messages.ts (the reads), ./flush-decisions.ts (decide, append),
// ./key-states.ts (the cache of states).

/** The most jobs the states kept for load hold together (a state of 20,000 jobs is ~10 MB). */
const LOADED_JOBS = 50_000;
/** The most events after a kept state that load folds onto it; more, and it reads the snapshot. */
const LOAD_TAIL = 1_000;

/**
 * Group commit for every key of the process: whatever is submitted while a flush is in flight
 * goes into the next one, so an idle writer writes a command at once and a busy one writes
 * hundreds per transaction, each stream with its own expected revision.
 */
export class KeyWriter {
  /** What the flushes share with the writer (./flush-context.ts). */
  private readonly ctx: FlushContext;
  private readonly states: KeyStates;
  private submissions: Submission[] = [];
  private reads: Read[] = [];
  /** Flushes in flight, each on streams no other one touches. */
  private readonly inFlight = new Set<Promise<void>>();
  private scheduled = false;
  /** Every stream each submitted command decides on, as take() planned it (see streamsOf). */
  private readonly planned = new WeakMap<KeyCommand, readonly string[]>();
  /** FillSlots submitted and not yet written, by stream and place: the same one is not asked twice. */
  private readonly filling = new Set<string>();
  /** The states load gave, kept for the next load of their stream (./loaded-states.ts). */
  private readonly loaded = new LoadedStates(LOADED_JOBS);

  constructor(
    store: LedgerStore,
    private readonly events: EventStore,
    options: KeyWriterOptions = {},
  ) {
    const { snapshotEvery, snapshotsKeptEvery } = { ...KEY_WRITER_DEFAULTS, ...options };
    for (const [field, n] of Object.entries({ snapshotEvery, snapshotsKeptEvery })) {
      if (!Number.isSafeInteger(n) || n < 0) throw new ValidationError(field, 'must be an integer of 0 or more');
    }
    // A kept state is a snapshot the flush saves anyway.
    if (snapshotEvery > 0 && snapshotsKeptEvery % snapshotEvery !== 0) throw new ValidationError('snapshotsKeptEvery', `must be a multiple of snapshotEvery (${snapshotEvery}), or 0`);
    const log = options.logger ?? silentLogger;
    this.states = new KeyStates(options.cacheSize ?? KEY_WRITER_DEFAULTS.cacheSize, events, log);
    this.ctx = {
      store,
      states: this.states,
      log,
      outages: options.outages ?? noOutages,
      clock: options.clock ?? Date.now,
      random: options.random ?? Math.random,
      options: { ...KEY_WRITER_DEFAULTS, ...options },
      busy: new Set(),
      learned: new WeakMap(),
      lastIds: new WeakMap(),
      quarantined: new Set(),
      passOver: new PassOver(),
      streamsOf: (item) => this.streamsOf(item),
      plan: (item) => this.plan(item),
      putFirst: (submission) => this.submissions.unshift(submission),
      requeue: (postponed) => this.requeue(postponed),
      fillLater: (stream, fill) => this.fillLater(stream, fill),
    };
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
    if (this.scheduled || this.inFlight.size >= this.ctx.options.maxConcurrentFlushes) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      while (this.inFlight.size < this.ctx.options.maxConcurrentFlushes) {
        const next = this.take();
        if (next === undefined) return;
        const streams = new Set(next.batch.flatMap((s) => s.items.flatMap((i) => this.streamsOf(i))));
        for (const stream of streams) this.ctx.busy.add(stream);
        const flight: Promise<void> = runFlush(this.ctx, next.batch, next.reads, streams).finally(() => {
          for (const stream of streams) this.ctx.busy.delete(stream);
          this.inFlight.delete(flight);
          this.states.trim(this.ctx.busy);
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
    const blocked = new Set(this.ctx.busy);
    let commands = 0;
    for (const s of this.submissions) {
      const full = batch.length > 0 && commands + s.items.length > this.ctx.options.maxFlushCommands;
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
    const streams = [...new Set([item.stream, ...this.states.related(item), ...(this.ctx.learned.get(item) ?? [])])];
    this.planned.set(item, streams);
    return streams;
  }

  private streamsOf(item: KeyCommand): readonly string[] {
    return this.planned.get(item) ?? [item.stream];
  }

  private requeue(postponed: readonly Submission[]): void {
    const failed = postponed.filter((s) => ++s.attempts >= this.ctx.options.maxAttempts);
    for (const s of failed) s.reject(new ConflictRetriesExhaustedError(submissionStreams(s), s.attempts));
    // In front: a postponed submission must still be decided before those that came after it.
    this.submissions.unshift(...postponed.filter((s) => !failed.includes(s)));
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
    this.ctx.learned.set(item, new Set(needs));
    this.executeMany([item])
      .catch((error: unknown) =>
        error instanceof EventDecodeError
          ? this.ctx.log.debug({ stream, unreadable: error.stream }, 'a line waits on a quarantined stream: the sweeper serves it once it decodes')
          : this.ctx.log.warn({ err: error, stream }, 'serving a line that waits on further limits failed: the sweeper serves it'),
      )
      .finally(() => this.filling.delete(pending));
  }

  /**
   * The current state of a stream, to read and not to change (it is shared with the next reader):
   * read from the store, not from this writer's states, which only a flush may touch. A state
   * this load gave before is brought up by the events after it (at most LOAD_TAIL of them: more,
   * and the snapshot is nearer); otherwise the newest snapshot of this schema, then the events after it.
   */
  async load(stream: string): Promise<Loaded> {
    const kept = this.loaded.get(stream);
    if (kept !== undefined) {
      const tail = await this.events.readStream(stream, { fromRevision: kept.revision + 1, maxCount: LOAD_TAIL });
      if (tail.length === 0) return kept;
      if (tail.length < LOAD_TAIL) {
        const state = draftOf(kept.state);
        for (const recorded of tail) apply(state, decodeRecorded(recorded));
        const revision = tail.at(-1)!.revision;
        this.loaded.set(stream, state, revision);
        return { state, revision };
      }
    }
    const entry: Entry = { state: draftOf(initialKeyState), revision: 'no_stream', shared: true };
    const snapshot = await this.ctx.options.snapshots?.load(stream);
    const decoded = snapshot?.schemaVersion === KEY_STATE_SCHEMA_VERSION ? snapshotState(snapshot.state) : undefined;
    if (decoded !== undefined) {
      entry.state = draftOf(decoded);
      entry.revision = snapshot!.revision;
    }
    for (const recorded of await this.events.readStream(stream, { fromRevision: next(entry.revision) })) {
      apply(entry.state, decodeRecorded(recorded));
      entry.revision = recorded.revision;
    }
    if (entry.revision === 'no_stream') this.loaded.drop(stream);
    else this.loaded.set(stream, entry.state, entry.revision);
    return { state: entry.state, revision: entry.revision };
  }
}

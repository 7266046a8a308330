import { randomUUID } from 'node:crypto';
import * as E from 'fp-ts/lib/Either.js';
import type { Command } from '../domain/commands.js';
import { decideAcross, type FillLater } from '../domain/decide/index.js';
import type { DomainError } from '../domain/errors.js';
import type { KeyEvent } from '../domain/events.js';
import { KEY_STATE_SCHEMA_VERSION, Scratch, draftOf, initialKeyState } from '../domain/key-state.js';
import type { JsonObject, Snapshot, StreamRevision } from '../domain/ports/event-store.js';
import type { DecidedAppend } from '../domain/ports/ledger-store.js';
import { next, type Entry } from './key-states.js';
import type { CommandResult, KeyCommand } from './key-command.js';

// The decide and append steps of a flush (./key-writer.ts draws the whole cycle): each command
// decided in order, in place, on the states the lock brought up to date (a Scratch per stream
// journals the changes, so the flush can roll them back), and what it decided turned into one
// append per stream, each expecting the revision it was locked at, with a snapshot where a
// stream passes a multiple of snapshotEvery (kept, as a past state, where it passes one of
// snapshotsKeptEvery).

type StoredEvent = DecidedAppend['events'][number];

export interface FlushDecisionsOptions {
  /** The states the flush decides on, by stream (locked and caught up, or trusted: optimistic). */
  readonly entries: ReadonlyMap<string, Entry>;
  /** Each stream's Scratch; the flush rolls them back when it fails. */
  readonly scratches: Map<string, Scratch>;
  /** Streams that could not be read, with why: a decision that needs one fails with that error. */
  readonly broken: ReadonlyMap<string, unknown>;
  /** Streams taken to have no events, unlocked (a queue cap known to be absent): decided on as empty, their absence checked at commit. */
  readonly absent: (stream: string) => boolean;
  readonly now: number;
  /** The store's id of a decided event; a random one when it returns undefined. */
  readonly eventId?: ((stream: string, event: KeyEvent) => string | undefined) | undefined;
  /** Told of each refused command (the writer logs it). */
  readonly refused: (item: KeyCommand, refusal: DomainError) => void;
}

/** A decision needs a stream the flush could not read (`cause`: why, an EventDecodeError for a quarantined one). Nothing of the decision was kept. */
export class UnreadableStream extends Error {
  override readonly name = 'UnreadableStream';
  constructor(
    readonly stream: string,
    override readonly cause: unknown,
  ) {
    super(`the decision needs ${stream}, which cannot be read`);
  }
}

export class FlushDecisions {
  /** Each decided command's result (a refusal, or its events on its own stream). */
  readonly decided = new Map<KeyCommand, CommandResult>();
  /** The lines to serve after the commit, by stream (decideAcross's fillLater). */
  readonly fills = new Map<string, FillLater>();
  /** Each command's event ids: a commit whose answer was lost is looked up by them (#19). */
  readonly eventIds = new Map<KeyCommand, string[]>();
  /** Streams decided on as absent (options.absent): the commit checks that they still are. */
  readonly readAbsent = new Set<string>();
  private readonly appended = new Map<string, { events: KeyEvent[]; stored: StoredEvent[] }>();

  constructor(private readonly options: FlushDecisionsOptions) {}

  private scratchOf = (stream: string): Scratch | undefined => {
    const entry = this.options.entries.get(stream);
    if (entry === undefined) {
      if (!this.options.absent(stream)) return undefined;
      // Read as empty, never written: a decision that would write it has it as its own stream, which is always locked.
      this.readAbsent.add(stream);
      return new Scratch(draftOf(initialKeyState));
    }
    let scratch = this.options.scratches.get(stream);
    if (scratch === undefined) this.options.scratches.set(stream, (scratch = new Scratch(entry.state)));
    return scratch;
  };

  /**
   * Decides `item` on every stream it touches (as `command`, when the flush knows more than its
   * submitter: see flush-attempt.ts's graced). A decision that needs a stream the flush has not
   * got calls `missing` (which throws: the flush runs again), or throws why that stream cannot be read.
   */
  decide(item: KeyCommand, missing: (streams: readonly string[]) => never, command: Command = item.command): void {
    const outcome = decideAcross(command, item.stream, this.scratchOf, this.options.now);
    if (outcome.tag === 'needs') {
      const unreadable = outcome.streams.find((stream) => this.options.broken.has(stream));
      if (unreadable !== undefined) throw new UnreadableStream(unreadable, this.options.broken.get(unreadable));
      missing(outcome.streams);
    }
    const { result } = outcome;
    if (E.isLeft(result)) {
      this.options.refused(item, result.left);
      this.decided.set(item, result);
      return;
    }
    // A stream taken to be absent (a queue cap this writer never saw) that the decision writes to
    // exists after all, or is being created: it is decided again with the stream locked, as any
    // stream a plan missed. The plan is made from the cached states, which may not know yet that
    // the job is under that cap (the model checker, seed 20212: a cancel from a process opened
    // without the cap, of a job another process parked under it, failed with an internal error).
    const unlocked = [...result.right].filter(([stream, events]) => events.length > 0 && this.readAbsent.has(stream) && !this.options.entries.has(stream));
    if (unlocked.length > 0) missing(unlocked.map(([stream]) => stream));
    for (const [stream, fill] of outcome.fillLater) if (!this.fills.has(stream)) this.fills.set(stream, fill);
    const ids: string[] = [];
    for (const [stream, events] of result.right) {
      if (events.length === 0) continue;
      const a = this.appended.get(stream) ?? { events: [], stored: [] };
      for (const event of events) {
        // A given job id's JobEnqueued id is unique in the store: enqueued again, the commit fails (DuplicateEventIdError).
        const unique = event.type === 'JobEnqueued' && item.madeUpJobIds?.has(event.data.jobId) !== true;
        // Every event's id is ours, so a commit whose answer was lost can be looked up (#19); only a
        // unique one need be the store's rule (uuidv5 of the job id: a SHA-1 per job, measured at 13%
        // of a bulk enqueue's CPU), the others are random.
        const eventId = (unique || event.type !== 'JobEnqueued' ? this.options.eventId?.(stream, event) : undefined) ?? randomUUID();
        ids.push(eventId);
        a.events.push(event);
        a.stored.push({ type: event.type, data: event.data, ...(item.metadata ? { metadata: item.metadata } : {}), eventId, ...(unique ? { unique } : {}) });
      }
      this.appended.set(stream, a);
    }
    this.eventIds.set(item, ids);
    this.decided.set(item, E.right({ events: result.right.get(item.stream) ?? [], revision: this.options.entries.get(item.stream)!.revision }));
  }

  /**
   * One append per stream that has events, expecting the revision it was decided on; the
   * snapshots due (serialised by the commit before it awaits anything, so later changes to a
   * state cannot leak in); and each stream's revision after the commit.
   */
  appends({ snapshotEvery, keptEvery }: { readonly snapshotEvery: number; readonly keptEvery: number }): { appends: DecidedAppend[]; snapshots: Snapshot[]; after: Map<string, StreamRevision> } {
    const appends: DecidedAppend[] = [];
    const snapshots: Snapshot[] = [];
    const after = new Map<string, StreamRevision>();
    for (const [stream, { events, stored }] of this.appended) {
      if (events.length === 0) continue;
      const entry = this.options.entries.get(stream)!;
      const before = entry.revision;
      const revision = next(before) + events.length - 1;
      after.set(stream, revision);
      appends.push({ stream, expected: before, events: stored, decided: events });
      const passes = (every: number) => every > 0 && Math.floor((revision + 1) / every) !== Math.floor(next(before) / every);
      if (passes(snapshotEvery)) {
        // Kept at least as many events apart as the state has jobs: a kept state costs no more room than the events between two.
        const keep = passes(keptEvery) ? { spacing: Math.max(keptEvery, Object.keys(entry.state.jobs).length) } : undefined;
        snapshots.push({ stream, revision, schemaVersion: KEY_STATE_SCHEMA_VERSION, state: entry.state as unknown as JsonObject, ...(keep === undefined ? {} : { keep }) });
      }
    }
    return { appends, snapshots, after };
  }
}

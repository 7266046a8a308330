import type { Command } from '../domain/commands.js';
import { apply, draftOf, holders, initialKeyState, isUnderLimits, jobsIn, lineAfter, type Draft, type JobState, type KeyState, type LinePlace, snapshotState } from '../domain/key-state.js';
import type { EventStore, RecordedEvent, StreamRevision } from '../domain/ports/event-store.js';
import type { LockedStream } from '../domain/ports/ledger-store.js';
import type { Logger } from '../domain/ports/logger.js';
import { decodeRecorded } from '../domain/recorded.js';
import { isQueueCapStream, keyStream, queueCapKey } from '../domain/streams.js';
import type { KeyCommand } from './key-command.js';

// The key writer's "remember" (./key-writer.ts draws the whole cycle): the states of the streams
// it wrote or locked lately, each at its revision, brought up to where a lock found the stream
// before a decision, and dropped least recently used past the cache size. The ONE copy of a key's
// state in the process: the decision changes it in place (a Scratch journals the changes, so a
// failed flush rolls it back to the locked state).

export interface Entry {
  state: Draft;
  revision: StreamRevision | 'no_stream';
  /**
   * Another writer appended to the stream since this writer last did (its last lock brought
   * events, or a write that assumed otherwise failed): the next flush locks it first instead of
   * writing on the state it has.
   */
  shared: boolean;
}

export const next = (revision: StreamRevision | 'no_stream'): StreamRevision => (revision === 'no_stream' ? 0 : revision + 1);

/** Commands that may free a slot or raise a limit: their decision serves the line. */
const FREES = new Set<Command['type']>(['Complete', 'Fail', 'Yield', 'Stopped', 'Cancel', 'ExpireLeases', 'RevokeLease', 'SetLimit', 'ResumeKey', 'FillSlots']);
/**
 * How far into a line the streams of its jobs are locked with a release: the jobs (and streams) a
 * decision can reach at once. Past it the line is served by a FillSlots from where it stopped.
 */
const LINE_WINDOW = 64;

/** The writer's own streams and their states: read only between flushes, or inside one. */
export class KeyStates {
  private readonly entries = new Map<string, Entry>();
  /**
   * Queue cap streams this writer found to exist (true) or not (false). Every arrival reads its
   * queue's cap (Decision.queueCap); one not known to exist is taken to be absent: neither
   * planned nor locked, its absence checked at commit instead (Commit.readChecks), so the
   * arrivals of an uncapped queue share no stream. A check that fails (moved) marks it as
   * existing, and from then on it is locked with the arrivals that read it.
   */
  private readonly caps = new Map<string, boolean>();

  constructor(
    private readonly cacheSize: number,
    private readonly store: EventStore,
    private readonly log: Logger,
  ) {}

  revision(stream: string): StreamRevision | 'no_stream' {
    return this.entries.get(stream)?.revision ?? 'no_stream';
  }

  /** The entry, moved to the newest end of the LRU order. */
  entry(stream: string): Entry {
    let entry = this.entries.get(stream);
    if (entry === undefined) entry = { state: draftOf(initialKeyState), revision: 'no_stream', shared: true };
    else this.entries.delete(stream);
    this.entries.set(stream, entry);
    return entry;
  }

  /**
   * Brings the entry to where the lock found the stream: a newer snapshot first, then the events
   * after it, each checked to follow the last (so an event is never applied twice or skipped).
   * Throws EventDecodeError for an event that does not decode: that stream stays where it was.
   */
  async catchUp(locked: LockedStream): Promise<Entry> {
    const entry = this.entry(locked.stream);
    if (locked.snapshot !== undefined) {
      const decoded = snapshotState(locked.snapshot.state);
      if (decoded !== undefined) {
        entry.state = draftOf(decoded);
        entry.revision = locked.snapshot.revision;
      } else {
        // The events the lock did not return (up to the snapshot) are committed: read them here.
        this.log.warn({ stream: locked.stream, revision: locked.snapshot.revision }, 'snapshot does not decode; folding the stream instead');
        const upTo = await this.store.readStream(locked.stream, { fromRevision: next(entry.revision), maxCount: locked.snapshot.revision - next(entry.revision) + 1 });
        this.fold(entry, upTo);
      }
    }
    entry.shared = locked.snapshot !== undefined || locked.events.length > 0;
    if (isQueueCapStream(locked.stream)) this.caps.set(locked.stream, locked.revision !== 'no_stream');
    this.fold(entry, locked.events);
    if (entry.revision !== locked.revision) throw new Error(`key state of ${locked.stream} is at ${entry.revision}, the stream at ${locked.revision}`);
    return entry;
  }

  private fold(entry: Entry, events: readonly RecordedEvent[]): void {
    for (const recorded of events) {
      if (recorded.revision !== next(entry.revision)) throw new Error(`key state of ${recorded.stream} is at ${entry.revision}, the store gave revision ${recorded.revision}`);
      apply(entry.state, decodeRecorded(recorded));
      entry.revision = recorded.revision;
    }
  }

  /** Whether a flush may write on the cached state of `stream` without locking first (see Entry.shared). */
  current(stream: string, newStream = false): Entry | undefined {
    const entry = this.entries.get(stream);
    if (entry !== undefined) return entry.shared ? undefined : this.entry(stream);
    return newStream ? this.entry(stream) : undefined;
  }

  /**
   * The other streams a command is likely to decide on, from the state at hand (a guess: the
   * decision asks for any it misses): the limit keys of the jobs it enqueues or acts on, and, for
   * a command that frees slots or raises the limit, the streams of the jobs under further limits
   * at the head of the line (after `after`, for a FillSlots).
   */
  related(item: KeyCommand): string[] {
    const c = item.command;
    const out = new Set<string>();
    // An arrival reads its queue's cap (Decision.queueCap): locked with it unless known to be absent.
    const capOf = (queue: string) => {
      const stream = keyStream(queueCapKey(queue));
      if (!this.absent(stream)) out.add(stream);
    };
    if (c.type === 'Enqueue' || c.type === 'EnqueueMany') {
      for (const job of c.type === 'Enqueue' ? [c.job] : c.jobs) {
        capOf(job.queue);
        for (const l of job.limits ?? []) out.add(keyStream(l.key));
      }
    }
    // A dead job retried is admitted on its limit keys too (it has left the state: the command names them).
    if (c.type === 'RetryJob') {
      capOf(c.job.queue);
      for (const l of c.job.limits ?? []) out.add(keyStream(l));
    }
    const state = this.entries.get(item.stream)?.state;
    if (state === undefined) return [...out];
    /** The streams of a job of `line`'s stream: its home (for a guest) and its limit keys. */
    const add = (job: JobState | undefined, line = item.stream) => {
      if (job === undefined || !isUnderLimits(job)) return;
      out.add(job.home ?? line);
      for (const l of job.limits) out.add(keyStream(l));
    };
    switch (c.type) {
      case 'ExpireLeases':
      case 'RevokeLease':
        for (const job of holders(state)) if (c.type === 'ExpireLeases' || c.jobId === undefined || c.jobId === job.jobId) add(job);
        break;
      case 'AdmitDue':
        for (const job of jobsIn(state, 'scheduled')) add(job);
        break;
      case 'DiscardParked':
        for (const jobId of c.jobIds ?? lineAfter(state, Infinity)) add(state.jobs[jobId]);
        break;
      default:
        if ('jobId' in c && c.jobId !== undefined) add(state.jobs[c.jobId]);
    }
    if (FREES.has(c.type)) {
      // The lines it may serve: its own, and those of the limit keys it frees (known ones only).
      const lines: [string, KeyState, LinePlace | undefined][] = [[item.stream, state, c.type === 'FillSlots' ? c.after : undefined]];
      for (const stream of [...out]) {
        const other = this.entries.get(stream)?.state;
        if (other !== undefined) lines.push([stream, other, undefined]);
      }
      for (const [stream, line, after] of lines) {
        for (const jobId of lineAfter(line, LINE_WINDOW, after)) {
          add(line.jobs[jobId], stream);
          if (out.size >= LINE_WINDOW) break;
        }
      }
    }
    out.delete(item.stream);
    return [...out];
  }

  /** Whether `stream` is a queue cap's that this writer does not know to exist: decided on as absent, checked at commit. */
  absent(stream: string): boolean {
    return isQueueCapStream(stream) && this.caps.get(stream) !== true;
  }

  /** This writer appended to the stream (a queue's cap recorded here exists from now on). */
  wrote(stream: string): void {
    if (isQueueCapStream(stream)) this.caps.set(stream, true);
  }

  /** A write that assumed the stream unchanged (or absent) found it moved on. */
  moved(stream: string): void {
    const entry = this.entries.get(stream);
    if (entry !== undefined) entry.shared = true;
    if (isQueueCapStream(stream)) this.caps.set(stream, true);
  }

  /** Drops the least recently used states past the cache size, but none a flush in flight decides on. */
  trim(busy: ReadonlySet<string>): void {
    for (const stream of this.entries.keys()) {
      if (this.entries.size <= this.cacheSize) return;
      if (!busy.has(stream)) this.entries.delete(stream);
    }
  }
}


import * as E from 'fp-ts/lib/Either.js';
import { retryDelayMs } from '../backoff.js';
import type { DomainError } from '../errors.js';
import { mk, type EventData, type KeyEvent, type KeyEventType, type ReleaseReason } from '../events.js';
import { isUnderLimits, lineAfter, nextParked, type Draft, type JobEntry, type JobState, type KeyState, type LinePlace } from '../key-state.js';
import { keyStream, queueCapKey } from '../streams.js';

/**
 * The other streams of a decision that spans several (a job under further limits): each a
 * Decision of its own on the same flush's state, reached by stream name.
 */
export interface Across {
  /** The decision on `stream`, or undefined when its state is not at hand (the writer did not lock it). */
  readonly on: (stream: string) => Decision | undefined;
  /** A key's line is to be served (a slot of it went free, or a job ahead in it goes first) before any other line takes its slots. */
  readonly serve: (stream: string) => void;
  /** Serves the lines asked for so far, in the order they were asked for (a line asked again is served again). */
  readonly serveQueued: () => void;
  /** A key's line reached a job whose other streams (`needs`) are not at hand: serve it from `after` in a decision that has them. */
  readonly fillLater: (stream: string, after: LinePlace | undefined, needs: readonly string[]) => void;
}

/** The decision needs the state of streams it was not given: decide it again with them (nothing of it is kept). */
export class StreamsNeeded extends Error {
  override readonly name = 'StreamsNeeded';
  constructor(readonly streams: readonly string[]) {
    super(`the decision needs streams ${streams.join(', ')}`);
  }
}

/**
 * The states at hand disagree: a limit key's line names a guest its home does not know. Only a
 * copy trusted without reading it (an optimistic flush) can be behind another that was read
 * later; the caller decides again on states read in one transaction.
 */
export class StatesDisagree extends Error {
  override readonly name = 'StatesDisagree';
  constructor(readonly streams: readonly string[], jobId: string) {
    super(`the line of ${streams[0]} names ${jobId}, which its home ${streams[1]} does not know: a state at hand is behind`);
  }
}

// The steps every decision is made of. A Decision records events and folds each one at once, so a
// later step (promotion after a release, the second job of a batch) sees what the earlier ones did:
// this is what makes "release and hand the slot over" a single append.
//
// A job under further limits (JobEnqueued.limits) takes a slot in its own key and in each limit
// key at once, or waits in all their lines: every event of such a job here is mirrored, in the
// same decision, on each limit key's stream (SlotAcquired/JobPromoted as LimitHeld, JobParked as
// LimitWaiting, SlotReleased as LimitReleased, leaving a line as LimitLeft). This MUST stay one
// decision over every stream of the job, appended in one transaction with an expected revision
// each: a hold decided on one stream and written on another later would be a partial hold, and
// two writers could each take the last slot of a limit they share.
export class Decision {
  readonly events: KeyEvent[] = [];
  /** The key's state as the events so far leave it, changed in place, so each event costs O(1). */
  private readonly draft: Draft;

  /** `applyEvent` folds each emitted event into `draft`, the caller's state, through its Scratch (decideAcross). */
  constructor(
    draft: Draft,
    readonly now: number,
    private readonly applyEvent: (event: KeyEvent) => void,
    /** This decision's stream (named in a limit key's events as the home of its jobs). */
    readonly stream: string,
    private readonly across: Across,
  ) {
    this.draft = draft;
  }

  get state(): KeyState {
    return this.draft;
  }

  /** The decision on another stream of the same flush (undefined when it is not at hand). */
  on(stream: string): Decision | undefined {
    return stream === this.stream ? this : this.across.on(stream);
  }

  emit<T extends KeyEventType>(type: T, data: Omit<EventData<T>, 'at'>): void {
    // A wait records how the line stood (LineAtWait): the state before this event.
    const line = type === 'JobParked' || type === 'LimitWaiting' ? { line: { limit: this.draft.limit, holding: this.draft.holding, paused: this.draft.paused !== undefined } } : {};
    const event = mk(type, { ...data, ...line, at: this.now } as unknown as EventData<T>);
    const jobId = (data as { readonly jobId?: string }).jobId;
    const before = jobId === undefined ? undefined : this.draft.jobs[jobId];
    this.events.push(event);
    this.applyEvent(event);
    if (before !== undefined && before.home === undefined && isUnderLimits(before) && MIRRORED.has(event.type)) this.mirror(event, before);
  }

  /** The same step for the job on each of its limit keys (see the top of this file). */
  private mirror(event: KeyEvent, job: JobState & { limits: string[] }): void {
    const jobId = (event.data as { readonly jobId: string }).jobId;
    const guest = { jobId, home: this.stream, limits: job.limits, priority: job.priority };
    for (const other of this.limitDecisions(job)) {
      switch (event.type) {
        case 'SlotAcquired':
        case 'JobPromoted':
          other.emit('LimitHeld', { ...guest, leaseId: event.data.leaseId, waitedMs: event.type === 'JobPromoted' ? event.data.waitedMs : 0 });
          break;
        case 'JobParked':
          other.emit('LimitWaiting', guest);
          break;
        case 'SlotReleased':
          other.emit('LimitReleased', { jobId, leaseId: event.data.leaseId, reason: event.data.reason });
          this.across.serve(other.stream);
          break;
        case 'JobCancelled':
        case 'ParkedDiscarded':
        case 'ParkedReplaced':
          if (job.status === 'parked') other.emit('LimitLeft', { jobId, reason: event.type === 'ParkedReplaced' ? `replaced by ${event.data.by}` : `${event.type === 'JobCancelled' ? 'cancelled' : 'discarded'} by ${event.data.by}` });
          break;
      }
    }
  }

  /** The decisions of a home job's limit keys; StreamsNeeded when one is not at hand. */
  private limitDecisions(job: JobState & { limits: string[] }): Decision[] {
    const streams = job.limits.map(keyStream);
    const found = streams.map((s) => this.across.on(s));
    const missing = streams.filter((_, i) => found[i] === undefined);
    if (missing.length > 0) throw new StreamsNeeded(missing);
    return found as Decision[];
  }

  /**
   * The decisions of every OTHER stream a job is under (its home, for a guest, and its limit
   * keys), or undefined when one of them is not at hand.
   */
  private othersOf(job: JobState & { limits: string[] }): Decision[] | undefined {
    const out: Decision[] = [];
    for (const s of this.otherStreams(job)) {
      const d = this.across.on(s);
      if (d === undefined) return undefined;
      out.push(d);
    }
    return out;
  }

  private otherStreams(job: JobState & { limits: string[] }): string[] {
    return [job.home ?? this.stream, ...job.limits.map(keyStream)].filter((s) => s !== this.stream);
  }

  /** The streams of a job that are not at hand. */
  private missingOf(job: JobState & { limits: string[] }): string[] {
    return this.otherStreams(job).filter((s) => this.across.on(s) === undefined);
  }

  /**
   * Whether the job could take a slot now: here and, for a job under further limits, on each of
   * them. Throws StreamsNeeded when one of them is not at hand.
   */
  hasRoomFor(jobId: string): boolean {
    const job = this.draft.jobs[jobId];
    if (!this.hasFreeSlot()) return false;
    if (job === undefined || !isUnderLimits(job)) return true;
    const others = this.othersOf(job);
    if (others === undefined) throw new StreamsNeeded(this.missingOf(job));
    return others.every((d) => d.hasFreeSlot());
  }

  /** For a rejection: which limit of the job is full or paused ("key" when it is the job's own). */
  whyNoRoom(jobId: string): string {
    if (!this.hasFreeSlot()) return this.draft.paused === undefined ? `key full (limit ${this.draft.limit})` : 'key paused';
    const job = this.draft.jobs[jobId]!;
    const blocked = isUnderLimits(job) ? this.othersOf(job)?.find((d) => !d.hasFreeSlot()) : undefined;
    if (blocked === undefined) return 'no free slot';
    const key = blocked.stream.startsWith('key:') ? blocked.stream.slice('key:'.length) : blocked.stream;
    return blocked.state.paused === undefined ? `limit ${key} full (limit ${blocked.state.limit})` : `limit ${key} paused`;
  }

  /**
   * The limit key of `queue`'s cap when the ledger holds one (its stream's limit, read in this
   * decision and checked at commit), never the deciding process's configuration: every arrival
   * on the queue is under it, whoever enqueued it (issue 21, item 2; invariant 10). Undefined when
   * the queue has no cap, or when this is the cap's own stream.
   */
  queueCap(queue: string): string | undefined {
    const cap = queueCapKey(queue);
    const stream = keyStream(cap);
    if (stream === this.stream) return undefined;
    const capped = this.on(stream);
    if (capped === undefined) throw new StreamsNeeded([stream]);
    return capped.state.limit > 0 ? cap : undefined;
  }

  job(jobId: string): JobEntry | undefined {
    const job = this.state.jobs[jobId];
    return job && { ...job, jobId };
  }

  private nextLeaseId(jobId: string): string {
    return `${jobId}:${this.state.admissions + 1}`;
  }

  /**
   * A line served later (its FillSlots) keeps this decision's free slots for itself: a job of
   * another line taking one now would jump the jobs waiting in it.
   */
  private servedLater = false;

  /** A paused key has none: nothing new is admitted on it until it is resumed. */
  hasFreeSlot(): boolean {
    return this.draft.paused === undefined && !this.servedLater && this.draft.holding < this.draft.limit;
  }

  /**
   * A due job takes a free slot or parks. Parked jobs are only ever waiting when the key is full
   * or paused (invariant 2), so a free slot means nobody is ahead. The admission has no expiry: its lease
   * starts counting when a worker starts it.
   */
  admit(jobId: string): void {
    if (this.hasRoomFor(jobId)) {
      this.emit('SlotAcquired', { jobId, leaseId: this.nextLeaseId(jobId), expiresAt: null });
    } else {
      this.emit('JobParked', { jobId });
    }
  }

  /**
   * Hands every free slot to parked jobs in promotion order. Runs after anything that frees a slot
   * or raises the limit. A job under further limits takes its slots here and on each of them at
   * once (promoted on its home stream, mirrored), when its turnOf says so; a job of this line
   * whose other limit is full is passed over, and promoted when the last of them frees, from
   * that key's line. Lines freed on other keys by this decision are served first.
   */
  fillSlots(after?: LinePlace): void {
    this.across.serveQueued();
    let place = after;
    while (this.hasFreeSlot()) {
      // As many as there are free slots: a job passed over makes the next round read on from it.
      const line = nextParked(this.state, this.draft.limit - this.draft.holding, place);
      if (line.length === 0) return;
      for (const next of line) {
        if (!this.hasFreeSlot()) return;
        // A line served inside this walk (see 'after') may have promoted it meanwhile.
        if (this.draft.jobs[next.jobId]?.status !== 'parked') continue;
        const turn = isUnderLimits(next) ? this.turnOf(next) : 'now';
        if (typeof turn === 'object') {
          // Streams it needs are not at hand: the rest of this line, and its free slots, wait for a FillSlots that has them.
          this.across.fillLater(this.stream, place, turn.later);
          this.servedLater = true;
          return;
        }
        if (turn === 'after') {
          // A job ahead of it in another of its lines goes first; this line is served again after that one.
          this.across.serve(this.stream);
          return;
        }
        if (turn === 'now') {
          const home = next.home === undefined ? this : this.on(next.home)!;
          // Found by the model checker (seed 420041): a cancel promoted a guest on a stale copy of its home.
          if (home.draft.jobs[next.jobId] === undefined) throw new StatesDisagree([this.stream, home.stream], next.jobId);
          home.promote(next.jobId);
        }
        place = next;
      }
    }
  }

  /**
   * Whether a parked job under further limits (this line has room) takes its slots now. A job's
   * place is the same in each of its lines (it enters them all in one append: see key-state's
   * JobParked), so "the first job that can take a slot, in every line it is in" is one fair
   * order for all of them:
   * - blocked: one of its other lines is full (or paused): passed over;
   * - after: a job ahead of it in one of its other lines could take a slot there: that line is
   *   served first (then this one again);
   * - later: streams it, or a job ahead of it, is under are not at hand (those streams);
   * - now: every line has room and no one ahead of it in any of them could take it.
   */
  private turnOf(job: JobEntry & { limits: string[] }): 'now' | 'blocked' | 'after' | { readonly later: readonly string[] } {
    const others = this.othersOf(job);
    if (others === undefined) return { later: this.missingOf(job) };
    if (!others.every((d) => d.hasFreeSlot())) return 'blocked';
    for (const other of others) {
      const ahead = other.takerAhead(job.jobId);
      if (typeof ahead === 'object') {
        other.across.fillLater(other.stream, undefined, ahead.later);
        other.servedLater = true;
        return ahead;
      }
      if (ahead) {
        this.across.serve(other.stream);
        return 'after';
      }
    }
    return 'now';
  }

  /**
   * Whether a job ahead of `jobId` in this line (which has room) could take a slot now; `later`
   * (the streams) when that depends on streams not at hand. Looks LINE_LOOK_AHEAD places ahead at most.
   */
  private takerAhead(jobId: string): boolean | { readonly later: readonly string[] } {
    for (const id of lineAfter(this.state, LINE_LOOK_AHEAD)) {
      if (id === jobId) return false;
      const job = this.draft.jobs[id]!;
      if (!isUnderLimits(job)) return true;
      const others = this.othersOf(job);
      if (others === undefined) return { later: this.missingOf(job) };
      if (others.every((d) => d.hasFreeSlot())) return true;
    }
    return false;
  }

  /** A parked job of this stream takes a slot (and, under further limits, one on each: mirrored). */
  private promote(jobId: string): void {
    const job = this.draft.jobs[jobId]!;
    this.emit('JobPromoted', { jobId, leaseId: this.nextLeaseId(jobId), expiresAt: null, waitedMs: this.now - (job.parkedAt ?? this.now) });
  }

  /**
   * A worker begins running the holder: the attempt is counted and the lease starts counting from
   * now. `msgId`: the message it was read from (none for a direct handoff).
   */
  start(job: JobEntry, workerId: string, msgId?: string): void {
    if (job.lease === null) throw new Error(`start of job ${job.jobId} that holds no slot`);
    this.emit('JobStarted', {
      jobId: job.jobId,
      leaseId: job.lease.leaseId,
      workerId,
      attempt: job.attempts + 1,
      expiresAt: this.now + job.leaseMs,
      ...(msgId === undefined ? {} : { msgId }),
    });
  }

  /**
   * Direct handoff: the worker whose job ended starts the first job this decision promoted onto
   * its queue. Nothing changes for the limit: the promoted job holds its slot either way; it is
   * only started without a worker's read claiming it.
   */
  handOff(to: { readonly workerId: string; readonly queue: string } | undefined): void {
    if (to === undefined) return;
    for (const event of this.events) {
      if (event.type !== 'JobPromoted') continue;
      const job = this.job(event.data.jobId);
      if (job?.queue === to.queue && job.lease?.leaseId === event.data.leaseId && job.lease.workerId === null) {
        this.start(job, to.workerId);
        return;
      }
    }
  }

  /** Frees the slot (naming the dispatch message a lease started before migration 0015 ran from). */
  release(job: JobEntry, reason: ReleaseReason): void {
    if (job.lease === null) throw new Error(`release of job ${job.jobId} that holds no slot`);
    const { leaseId, msgId } = job.lease;
    this.emit('SlotReleased', { jobId: job.jobId, leaseId, reason, ...(msgId === null ? {} : { msgId }) });
  }

  /**
   * A started lease an operator revoked ends (its worker said the handler stopped, or the lease
   * `lapsed`): only now does the slot pass on. A cancelled job is finished; a released one goes
   * back to be retried, as any reclaimed lease's job does.
   */
  endRevoked(job: JobEntry, jitter: number, lapsed: boolean): void {
    const revoked = job.lease?.revoked;
    if (revoked === undefined) throw new Error(`job ${job.jobId}: its lease was not revoked`);
    if (revoked.cancel) {
      this.emit('JobCancelled', { jobId: job.jobId, by: revoked.by });
      this.release(job, lapsed ? 'expired' : 'cancelled');
    } else {
      this.release(job, lapsed ? 'expired' : 'revoked');
      this.afterReclaim(job, jitter, `lease revoked by ${revoked.by}`);
    }
  }

  /**
   * After a slot was taken back from a job (expired, revoked): a started job has used an attempt
   * and is retried after a backoff, or is dead; a job that never started burned nothing and waits
   * in line again with its priority and enqueue order.
   */
  afterReclaim(job: JobEntry, jitter: number, why: string): void {
    if (job.lease?.workerId == null) this.emit('JobParked', { jobId: job.jobId });
    else this.retryOrDead(job, jitter, why);
  }

  retryOrDead(job: JobEntry, jitter: number, why: string): void {
    const runAt = this.retryAt(job, jitter);
    if (runAt === null) {
      this.emit('JobDead', { jobId: job.jobId, reason: `${why}; no attempt left (${job.attempts}/${job.maxAttempts})` });
    } else {
      this.emit('JobScheduled', { jobId: job.jobId, runAt });
    }
  }

  retryAt(job: JobEntry, jitter: number): number | null {
    return job.attempts >= job.maxAttempts ? null : this.now + retryDelayMs(job.attempts, jitter);
  }
}

/** How far ahead of a job in one of its lines turnOf looks for a job that goes first. */
const LINE_LOOK_AHEAD = 64;

/** A home job's events that change where it stands on its limit keys (the rest concern its home alone: a start, a renewal, a failure's record). */
const MIRRORED = new Set<KeyEventType>(['SlotAcquired', 'JobPromoted', 'JobParked', 'SlotReleased', 'JobCancelled', 'ParkedDiscarded', 'ParkedReplaced']);

export type Outcome = E.Either<DomainError, readonly KeyEvent[]>;

export const refuse = (error: DomainError): Outcome => E.left(error);
export const accept = (d: Decision): Outcome => E.right(d.events);

/**
 * The holder under this exact lease, or the refusal that fences a stale holder: a lease reclaimed,
 * released or replaced changes nothing (solid_queue #761).
 */
export const leaseHolder = (
  d: Decision,
  jobId: string,
  leaseId: string,
): { readonly job: JobEntry; readonly error?: undefined } | { readonly job?: undefined; readonly error: DomainError } => {
  const job = d.job(jobId);
  if (job?.home !== undefined) return { error: { tag: 'HeldElsewhere', jobId, home: job.home } };
  if (job?.lease?.leaseId !== leaseId) {
    return { error: { tag: 'StaleLease', jobId, leaseId, currentLeaseId: job?.lease?.leaseId ?? null } };
  }
  return { job };
};

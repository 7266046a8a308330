import * as E from 'fp-ts/lib/Either.js';
import { retryDelayMs } from '../backoff.js';
import type { DomainError } from '../errors.js';
import { mk, type EventData, type KeyEvent, type KeyEventType, type ReleaseReason } from '../events.js';
import { apply, nextParked, type Draft, type JobEntry, type KeyState } from '../key-state.js';

// The steps every decision is made of. A Decision records events and folds each one at once, so a
// later step (promotion after a release, the second job of a batch) sees what the earlier ones did:
// this is what makes "release and hand the slot over" a single append.
export class Decision {
  readonly events: KeyEvent[] = [];
  /** The key's state as the events so far leave it, changed in place, so each event costs O(1). */
  private readonly draft: Draft;

  /**
   * `apply` folds each emitted event into `draft`: a copy of the key's state (decide) or the
   * caller's own state through its Scratch (decideInto).
   */
  constructor(
    draft: Draft,
    readonly now: number,
    private readonly applyEvent: (event: KeyEvent) => void = (event) => apply(draft, event),
  ) {
    this.draft = draft;
  }

  get state(): KeyState {
    return this.draft;
  }

  emit<T extends KeyEventType>(type: T, data: Omit<EventData<T>, 'at'>): void {
    const event = mk(type, { ...data, at: this.now } as unknown as EventData<T>);
    this.events.push(event);
    this.applyEvent(event);
  }

  job(jobId: string): JobEntry | undefined {
    const job = this.state.jobs[jobId];
    return job && { ...job, jobId };
  }

  private nextLeaseId(jobId: string): string {
    return `${jobId}:${this.state.admissions + 1}`;
  }

  /** A paused key has none: nothing new is admitted on it until it is resumed. */
  hasFreeSlot(): boolean {
    return this.draft.paused === undefined && this.draft.holding < this.draft.limit;
  }

  /**
   * A due job takes a free slot or parks. Parked jobs are only ever waiting when the key is full
   * or paused (invariant 2), so a free slot means nobody is ahead. The admission has no expiry: its lease
   * starts counting when a worker starts it.
   */
  admit(jobId: string): void {
    if (this.hasFreeSlot()) {
      this.emit('SlotAcquired', { jobId, leaseId: this.nextLeaseId(jobId), expiresAt: null });
    } else {
      this.emit('JobParked', { jobId });
    }
  }

  /** Hands every free slot to parked jobs in promotion order. Runs after anything that frees a slot or raises the limit. */
  fillSlots(): void {
    for (const next of nextParked(this.state, this.draft.limit - this.draft.holding)) {
      if (!this.hasFreeSlot()) return;
      this.emit('JobPromoted', {
        jobId: next.jobId,
        leaseId: this.nextLeaseId(next.jobId),
        expiresAt: null,
        waitedMs: this.now - (next.parkedAt ?? this.now),
      });
    }
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
   * only started without waiting for its message (the dispatcher sends none for it).
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

  /** Frees the slot; its dispatch message (if the lease ran from one) is archived in the same append. */
  release(job: JobEntry, reason: ReleaseReason): void {
    if (job.lease === null) throw new Error(`release of job ${job.jobId} that holds no slot`);
    const { leaseId, msgId } = job.lease;
    this.emit('SlotReleased', { jobId: job.jobId, leaseId, reason, ...(msgId === null ? {} : { msgId }) });
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
  if (job?.lease?.leaseId !== leaseId) {
    return { error: { tag: 'StaleLease', jobId, leaseId, currentLeaseId: job?.lease?.leaseId ?? null } };
  }
  return { job };
};

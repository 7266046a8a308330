import * as t from 'io-ts';
import type { KeyEvent } from './events.js';

// The state of one concurrency key, folded from its stream. Only jobs that are not finished are
// kept: a key may see millions of jobs, its state holds those still scheduled, parked or holding.
// The state is plain JSON so it can be snapshotted (KeyStateCodec checks a snapshot on load).

const Lease = t.type({
  leaseId: t.string,
  /** When the slot was taken (acquired or promoted). */
  acquiredAt: t.number,
  /** null until a worker starts the job: an admission nobody has started never expires. */
  expiresAt: t.union([t.number, t.null]),
  /** Set by JobStarted; null until a worker starts the job under this lease. */
  workerId: t.union([t.string, t.null]),
  /** The dispatch message the worker started it from (JobStarted.msgId, before migration 0015); null before, for a direct handoff, and since. */
  msgId: t.union([t.string, t.null]),
});
/**
 * A started lease an operator revoked (LeaseRevoked): its handler is told to stop, and the slot
 * stays held until the worker says it stopped or the lease lapses. `cancel`: the job is cancelled
 * then, instead of being retried.
 */
const Revoked = t.type({ by: t.string, at: t.number, cancel: t.boolean });
const LeaseState = t.intersection([Lease, t.partial({ revoked: Revoked })]);
export type Lease = t.TypeOf<typeof LeaseState>;

export const JobStatus = t.keyof({
  /** Transient inside one append: enqueued or released, its next place not yet recorded. */
  pending: null,
  scheduled: null,
  parked: null,
  holding: null,
  /** Transient inside one append: finished, its slot not yet released. */
  finishing: null,
});
export type JobStatus = t.TypeOf<typeof JobStatus>;

const JobStateFields = t.type({
  status: JobStatus,
  priority: t.number,
  /** Enqueue order within the key; ties between equal priorities go to the lower one. */
  seq: t.number,
  /** Starts so far (a refused or yielded admission is not an attempt). */
  attempts: t.number,
  maxAttempts: t.number,
  leaseMs: t.number,
  /** Dispatch queue of its admissions: a direct handoff (Complete/Fail handOffTo) starts it only on a worker of this queue. */
  queue: t.string,
  /** When a scheduled job is due; null otherwise. */
  runAt: t.union([t.number, t.null]),
  /** When a parked job was parked; null otherwise. */
  parkedAt: t.union([t.number, t.null]),
  lease: t.union([LeaseState, t.null]),
});
/** A job given back by workers that cannot run it (JobYielded with retryAt): how often, since when; reset when a handler fails it. */
const GivenBack = t.type({ count: t.number, since: t.number });

/**
 * `givenBack`: see GivenBack (absent until the first give-back).
 * `debounce`: the job's name, kept only for a job enqueued with whenFull "replace": a newer one of
 * the same name that parks replaces it while it is parked. `limits`: the further limit keys of a
 * job under several limits (JobEnqueued.limits). `home`: set on a limit key's entry for a job of
 * another stream (a guest: LimitWaiting/LimitHeld), which waits or holds here and nothing else
 * (its attempts, queue and lease live at home).
 */
const JobState = t.intersection([JobStateFields, t.partial({ debounce: t.string, limits: t.array(t.string), home: t.string, givenBack: GivenBack })]);
export type JobState = t.TypeOf<typeof JobState>;

/** Who paused the key, why and when: while paused nothing is admitted on it. */
const Pause = t.type({ by: t.string, reason: t.union([t.string, t.null]), at: t.number });
export type Pause = t.TypeOf<typeof Pause>;

const KeyStateFields = t.type({
  /** 0 until the key's first KeyLimitSet. */
  limit: t.number,
  leaseMs: t.number,
  nextSeq: t.number,
  /** Admissions so far: numbers the lease ids, so each admission's lease is distinct. */
  admissions: t.number,
  /** Jobs holding a slot now (kept by apply, so an admission needs no count over every job). */
  holding: t.number,
  jobs: t.record(t.string, JobState),
});
/**
 * `paused` is absent while the key runs (and in states and snapshots made before pauses existed).
 * `dead`: the key's own jobs that died and were neither retried nor discarded since (jobId: when
 * it died), so that a retry and a discard of one dead job are decided on the state and exclude
 * each other (issue 21, item 5); absent while there is none.
 */
export const KeyStateCodec = t.intersection([KeyStateFields, t.partial({ paused: Pause, dead: t.record(t.string, t.number) })]);
export type KeyState = t.TypeOf<typeof KeyStateCodec>;

/**
 * A snapshot's state, or undefined when it is not a KeyState (it is then ignored and the stream
 * folded). Checked with the codec's guard (`is`), which accepts exactly what `decode` accepts (no
 * codec here transforms) without building the state again: decode copied each of a 20,000-job
 * state's jobs through its intersections (~80 ms more than the check, on bench:reads' capped
 * queue). Guarded by "snapshotState accepts what KeyStateCodec decodes" (key-state.unit.test.ts).
 */
export const snapshotState = (parsed: unknown): KeyState | undefined => (KeyStateCodec.is(parsed) ? parsed : undefined);

/** Bump when KeyState's shape or meaning changes: snapshots of another version are ignored and the stream is folded instead. */
export const KEY_STATE_SCHEMA_VERSION = 4;

export const initialKeyState: KeyState = { limit: 0, leaseMs: 0, nextSeq: 0, admissions: 0, holding: 0, jobs: {} };

export type JobEntry = JobState & { readonly jobId: string };

/** The jobs that pass `keep`, as entries; only those are copied (a key may hold thousands of jobs). */
const entries = (state: KeyState, keep: (job: JobState) => boolean): JobEntry[] => {
  const out: JobEntry[] = [];
  for (const jobId in state.jobs) {
    const job = state.jobs[jobId]!;
    if (keep(job)) out.push({ ...job, jobId });
  }
  return out;
};

export const jobsIn = (state: KeyState, status: JobStatus): JobEntry[] => entries(state, (j) => j.status === status);

export const holders = (state: KeyState): JobEntry[] => entries(state, (j) => j.lease !== null);

/** Promotion order: smaller priority first, then enqueue order. */
export const byPromotionOrder = (a: JobEntry, b: JobEntry): number => a.priority - b.priority || a.seq - b.seq;

// The parked jobs of a state in promotion order, kept BESIDE it (not in its JSON): a key with a
// long backlog would otherwise scan every job on each promotion. Built on first use; apply keeps it
// in order as jobs are parked and leave parking (a parked job's priority and seq never change), and
// a Scratch's rollback goes back through it. A copy (draftOf, fold) starts without one.
const parkedIndexes = new WeakMap<KeyState, string[]>();

type Place = Pick<JobState, 'priority' | 'seq'>;

const precedes = (a: Place, b: Place): boolean => a.priority < b.priority || (a.priority === b.priority && a.seq < b.seq);

/** Where a job with `job`'s priority and seq is, or goes, in the index (binary search). */
const positionIn = (index: readonly string[], jobs: Readonly<Record<string, JobState>>, job: Place): number => {
  let lo = 0;
  let hi = index.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (precedes(jobs[index[mid]!]!, job)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
};

const parkedIndex = (state: KeyState): string[] => {
  let index = parkedIndexes.get(state);
  if (index === undefined) {
    index = jobsIn(state, 'parked').sort(byPromotionOrder).map((j) => j.jobId);
    parkedIndexes.set(state, index);
  }
  return index;
};

/** Keeps a state's parked index (if it has one) in order as a job moves into or out of parking. */
const reindex = (d: Draft, jobId: string, job: JobState | undefined, next: JobState | undefined): void => {
  const index = parkedIndexes.get(d);
  const was = job?.status === 'parked';
  const is = next?.status === 'parked';
  if (index === undefined || was === is) return;
  if (was) {
    const at = positionIn(index, d.jobs, job!);
    if (index[at] !== jobId) throw new Error(`parked index of the key lost job ${jobId}`);
    index.splice(at, 1);
  } else {
    index.splice(positionIn(index, d.jobs, next!), 0, jobId);
  }
};

export const parkedInOrder = (state: KeyState): JobEntry[] => nextParked(state, Infinity);

/** The first `n` parked jobs in promotion order (after `after`, when given). */
export const nextParked = (state: KeyState, n: number, after?: LinePlace): JobEntry[] =>
  lineAfter(state, n, after).map((jobId) => ({ ...state.jobs[jobId]!, jobId }));

/** The ids of the first `n` parked jobs in promotion order after `after` (from the head when absent). */
export const lineAfter = (state: KeyState, n: number, after?: LinePlace): string[] => {
  if (n <= 0) return [];
  const index = parkedIndex(state);
  // seq + 0.5: the first place after `after` itself (seqs are whole numbers).
  const from = after === undefined ? 0 : positionIn(index, state.jobs, { priority: after.priority, seq: after.seq + 0.5 });
  return index.slice(from, from + n);
};

/**
 * A parked job's place in the key's line (n of m, in promotion order) and the first `shown` jobs
 * ahead of it; null for a job not parked here. One pass over the jobs, without ordering the
 * line (an explanation asks this once of a state it just loaded: ordering a 3,000-job line and
 * copying each entry was most of its time). The same answer as lineAfter's line: guarded by
 * "placeInLine is the place in lineAfter's line" (key-state.unit.test.ts).
 */
export const placeInLine = (state: KeyState, jobId: string, shown: number): { readonly place: { readonly n: number; readonly of: number }; readonly ahead: string[] } | null => {
  const me = state.jobs[jobId];
  if (me?.status !== 'parked') return null;
  let of = 0;
  let before = 0;
  // The first `shown` of those ahead, in promotion order (a short list kept sorted).
  const ahead: string[] = [];
  for (const id in state.jobs) {
    const job = state.jobs[id]!;
    if (job.status !== 'parked') continue;
    of++;
    if (!precedes(job, me)) continue;
    before++;
    if (ahead.length === shown && !precedes(job, state.jobs[ahead[shown - 1]!]!)) continue;
    let at = ahead.length;
    while (at > 0 && precedes(job, state.jobs[ahead[at - 1]!]!)) at--;
    ahead.splice(at, 0, id);
    if (ahead.length > shown) ahead.pop();
  }
  return { place: { n: before + 1, of }, ahead };
};

/** A place in a key's line: the jobs after it are those later in promotion order. */
export interface LinePlace {
  readonly priority: number;
  readonly seq: number;
}


/**
 * A state changed in place event by event: fold's own copy (O(jobs + events) instead of a copy
 * per event), a Decision's draft, or a state its owner moves forward in place (the key writer,
 * through apply and Scratch). Job objects are replaced, never changed, so states
 * handed out before share them safely.
 */
export type Draft = { -readonly [K in keyof KeyState]: KeyState[K] } & { jobs: Record<string, JobState> };

export const draftOf = (state: KeyState): Draft => ({ ...state, jobs: { ...state.jobs }, ...(state.dead === undefined ? {} : { dead: { ...state.dead } }) });

/** Whether the job died on this key and was neither retried nor discarded since. */
export const isDead = (state: KeyState, jobId: string): boolean => state.dead !== undefined && Object.hasOwn(state.dead, jobId);

/** Marks a job dead (`at`) or not (undefined), in place. */
const setDead = (d: Draft, jobId: string, at: number | undefined): void => {
  if (at !== undefined) (d.dead ??= {})[jobId] = at;
  else if (d.dead !== undefined && Object.hasOwn(d.dead, jobId)) {
    delete d.dead[jobId];
    if (Object.keys(d.dead).length === 0) delete d.dead;
  }
};

const setJob = (d: Draft, jobId: string, update: (job: JobState) => JobState | undefined): void => {
  const job = d.jobs[jobId];
  if (job === undefined) return;
  const next = update(job);
  reindex(d, jobId, job, next);
  if (next === undefined) delete d.jobs[jobId];
  else d.jobs[jobId] = next;
};

/** A finished job leaves the state once it holds no slot. */
const finish = (job: JobState): JobState | undefined =>
  job.lease === null ? undefined : { ...job, status: 'finishing' };

/** Applies one event to a draft, in place. */
export const apply = (d: Draft, event: KeyEvent): void => {
  switch (event.type) {
    case 'KeyLimitSet':
      d.limit = event.data.limit;
      d.leaseMs = event.data.leaseMs;
      return;
    case 'KeyPaused':
      d.paused = { by: event.data.by, reason: event.data.reason, at: event.data.at };
      return;
    case 'KeyResumed':
      delete d.paused;
      return;
    case 'JobEnqueued': {
      const e = event.data;
      if (e.solo === true && d.limit === 0) {
        d.limit = 1;
        d.leaseMs = e.leaseMs;
      }
      return arrive(d, e.jobId, e, e.whenFull === 'replace' ? { debounce: e.name } : {});
    }
    case 'JobRetried':
      // Back as a new arrival: a fresh set of attempts and a place at the back of its line.
      setDead(d, event.data.jobId, undefined);
      return arrive(d, event.data.jobId, event.data, {});
    case 'DeadDiscarded':
      // Off the dead list: it can be neither retried nor discarded again.
      return setDead(d, event.data.jobId, undefined);
    case 'SlotAcquired':
    case 'JobPromoted': {
      const { leaseId, at } = event.data;
      d.admissions += 1;
      d.holding += 1;
      return setJob(d, event.data.jobId, (job) => ({
        ...job,
        status: 'holding',
        runAt: null,
        parkedAt: null,
        // Older events gave admissions an expiry; an unstarted admission has none now, whatever the event says.
        lease: { leaseId, acquiredAt: at, expiresAt: null, workerId: null, msgId: null },
      }));
    }
    case 'JobParked': {
      // A job under further limits takes a new place at the back of its own line, as it does in each
      // limit key's line in the same append (LimitWaiting): its place is then the same in all of
      // them, which is what makes "first in every line it is in" one fair order (decision.ts turnOf).
      const job = d.jobs[event.data.jobId];
      const seq = job !== undefined && isUnderLimits(job) ? d.nextSeq++ : job?.seq;
      return setJob(d, event.data.jobId, (j) => ({ ...j, status: 'parked', runAt: null, parkedAt: event.data.at, seq: seq! }));
    }
    case 'JobScheduled':
      return setJob(d, event.data.jobId, (job) => ({ ...job, status: 'scheduled', runAt: event.data.runAt, parkedAt: null }));
    case 'JobStarted': {
      const { attempt, workerId, expiresAt, msgId } = event.data;
      return setJob(d, event.data.jobId, (job) => ({ ...job, attempts: attempt, lease: job.lease && { ...job.lease, workerId, expiresAt, msgId: msgId ?? null } }));
    }
    case 'LeaseRenewed':
      return setJob(d, event.data.jobId, (job) => ({ ...job, lease: job.lease && { ...job.lease, expiresAt: event.data.expiresAt } }));
    case 'JobYielded': {
      // A yield hands the attempt back: the job did not fail, the worker stopped. A give-back (retryAt) is counted.
      const { retryAt, at } = event.data;
      return setJob(d, event.data.jobId, (job) => ({
        ...job,
        attempts: job.lease?.workerId != null ? job.attempts - 1 : job.attempts,
        ...(retryAt === undefined ? {} : { givenBack: { count: (job.givenBack?.count ?? 0) + 1, since: job.givenBack?.since ?? at } }),
      }));
    }
    case 'SlotReleased':
      d.holding -= 1;
      return setJob(d, event.data.jobId, (job) => (job.status === 'finishing' ? undefined : { ...job, status: 'pending', lease: null }));
    case 'JobDead':
      setDead(d, event.data.jobId, event.data.at);
      return setJob(d, event.data.jobId, finish);
    case 'JobCompleted':
    case 'JobCancelled':
    case 'ParkedDiscarded':
    case 'JobRejected':
    case 'ParkedReplaced':
      return setJob(d, event.data.jobId, finish);
    case 'LeaseRevoked': {
      // The SlotReleased that follows (in this append for a lease nobody started, later for a started one) frees the slot.
      // A cancel pending on the lease stays one when a release follows it.
      const revoke = (lease: Lease): Lease => ({ ...lease, revoked: { by: event.data.by, at: event.data.at, cancel: event.data.cancel === true || lease.revoked?.cancel === true } });
      return setJob(d, event.data.jobId, (job) => ({ ...job, lease: job.lease && revoke(job.lease) }));
    }
    case 'JobFailed':
      // A handler ran it: the give-backs before it no longer count. The SlotReleased that follows moves the job on.
      return setJob(d, event.data.jobId, (job) => {
        if (job.givenBack === undefined) return job;
        const { givenBack: _, ...rest } = job;
        return rest;
      });
    case 'LeaseExpired':
      // The SlotReleased that follows in the same append moves the job on.
      return;
    case 'LimitWaiting':
    case 'LimitHeld': {
      const e = event.data;
      const holds = event.type === 'LimitHeld';
      if (holds) d.holding += 1;
      const lease = event.type === 'LimitHeld' ? { leaseId: event.data.leaseId, acquiredAt: e.at, expiresAt: null, workerId: null, msgId: null } : null;
      const status = holds ? 'holding' : 'parked';
      const parkedAt = holds ? null : e.at;
      const existing = d.jobs[e.jobId];
      if (existing !== undefined) return setJob(d, e.jobId, (job) => ({ ...job, status, parkedAt, lease }));
      const guest: JobState = { status, priority: e.priority, seq: d.nextSeq, attempts: 0, maxAttempts: 0, leaseMs: 0, queue: '', runAt: null, parkedAt, lease, home: e.home, limits: e.limits };
      d.nextSeq += 1;
      reindex(d, e.jobId, undefined, guest);
      d.jobs[e.jobId] = guest;
      return;
    }
    case 'LimitReleased':
      d.holding -= 1;
      return setJob(d, event.data.jobId, () => undefined);
    case 'LimitLeft':
      return setJob(d, event.data.jobId, () => undefined);
  }
};

/** A job enters the state (enqueued, or a dead one retried), pending until the same append says where it goes. */
const arrive = (
  d: Draft,
  jobId: string,
  e: { readonly priority: number; readonly maxAttempts: number; readonly leaseMs: number; readonly queue: string; readonly limits?: readonly string[] | undefined },
  extra: Partial<JobState>,
): void => {
  d.jobs[jobId] = {
    status: 'pending',
    priority: e.priority,
    seq: d.nextSeq,
    attempts: 0,
    maxAttempts: e.maxAttempts,
    leaseMs: e.leaseMs,
    queue: e.queue,
    runAt: null,
    parkedAt: null,
    lease: null,
    ...extra,
    ...(e.limits !== undefined && e.limits.length > 0 ? { limits: [...e.limits] } : {}),
  };
  d.nextSeq += 1;
};

/** A job under further limits than its stream's own (at home, or as a guest of a limit key). */
export const isUnderLimits = (job: JobState): job is JobState & { limits: string[] } => job.limits !== undefined;

/** A point a Scratch can be rolled back to. */
export interface ScratchMark {
  readonly journal: number;
  readonly scalars: Pick<KeyState, 'limit' | 'leaseMs' | 'nextSeq' | 'admissions' | 'holding'>;
  readonly paused: Pause | undefined;
}

/**
 * Applies events to a state IN PLACE and can put it back as it was at any mark: a decision (or a
 * flush of many) on a key with thousands of jobs then costs what its events touch, not a copy of
 * the job table. The journal keeps each job's value before each change; rolling back replays it
 * backwards through the parked index, so the index stays in promotion order. Only for a state its
 * caller owns, and rolled back (or kept) before anyone else can see it.
 */
export class Scratch {
  private readonly journal: { readonly jobId: string; readonly before: JobState | undefined; readonly deadBefore: number | undefined }[] = [];
  readonly start: ScratchMark;

  constructor(readonly draft: Draft) {
    this.start = this.mark();
  }

  mark(): ScratchMark {
    const { limit, leaseMs, nextSeq, admissions, holding, paused } = this.draft;
    return { journal: this.journal.length, scalars: { limit, leaseMs, nextSeq, admissions, holding }, paused };
  }

  apply(event: KeyEvent): void {
    if ('jobId' in event.data) {
      const { jobId } = event.data;
      const d = this.draft;
      this.journal.push({ jobId, before: Object.hasOwn(d.jobs, jobId) ? d.jobs[jobId] : undefined, deadBefore: isDead(d, jobId) ? d.dead![jobId] : undefined });
    }
    apply(this.draft, event);
  }

  /** Undoes every change since `mark` (default: since the Scratch was made). */
  rollbackTo(mark: ScratchMark = this.start): void {
    const d = this.draft;
    while (this.journal.length > mark.journal) {
      const { jobId, before, deadBefore } = this.journal.pop()!;
      const now = Object.hasOwn(d.jobs, jobId) ? d.jobs[jobId] : undefined;
      reindex(d, jobId, now, before);
      if (before === undefined) delete d.jobs[jobId];
      else d.jobs[jobId] = before;
      setDead(d, jobId, deadBefore);
    }
    Object.assign(d, mark.scalars);
    if (mark.paused === undefined) delete d.paused;
    else d.paused = mark.paused;
  }
}

export const fold = (state: KeyState, events: readonly KeyEvent[]): KeyState => {
  if (events.length === 0) return state;
  const d = draftOf(state);
  for (const event of events) apply(d, event);
  return d;
};

export const evolve = (state: KeyState, event: KeyEvent): KeyState => fold(state, [event]);

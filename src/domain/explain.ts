import { auditKeyOf } from './audit.js';
import type { KeyEvent } from './events.js';
import { holders, placeInLine, type KeyState, type Lease, type Pause } from './key-state.js';

// "Why is this job waiting?": the answer from the states of the job's streams (its home and its
// limit keys, folded up to a moment) and the job's own events there. Pure: the caller loads both
// (src/commands/explain.ts) and passes the moment.

/** What the explainer is given: each stream as folded up to `asOf`, and the job's events on them in global order. */
export interface ExplainInput {
  readonly jobId: string;
  readonly asOf: number;
  /**
   * The workers live now (their heartbeat), when the explanation is of now: a started lease whose
   * worker is not among them is worker-gone. Absent for a past moment: presence keeps no history.
   */
  readonly liveWorkers?: ReadonlySet<string>;
  readonly home: ExplainStream;
  /** The job's further limit keys, in its JobEnqueued's order: each folded, or its line as read (LimitLine). */
  readonly limits: readonly (ExplainStream | LimitLine)[];
  readonly events: readonly ExplainEvent[];
}

export interface ExplainStream {
  readonly stream: string;
  readonly state: KeyState;
  /** When each holder's lease was started, by lease id. */
  readonly startedAt: ReadonlyMap<string, number>;
}

/** What a lease shows in an explanation. */
export type LineLease = Pick<Lease, 'leaseId' | 'acquiredAt' | 'expiresAt' | 'workerId'>;

/**
 * A limit key as an explanation shows it: its figures, its holders and the job's place in its
 * line. lineOf makes it from the key's state; a reader may answer it without the state (a queue
 * cap's key holds every waiting job of its queue: 20,000 jobs are a 4 MB state to load for ten
 * ids and two counts).
 */
export interface LimitLine {
  readonly stream: string;
  readonly limit: number;
  readonly holding: number;
  readonly paused: Pause | undefined;
  /** The job's place in the key's line (priority, then order): n of m; null when it is not in it. */
  readonly place: { readonly n: number; readonly of: number } | null;
  /** The first jobs ahead of it in the line (at most AHEAD_SHOWN). */
  readonly ahead: readonly string[];
  /** The jobs holding the key's slots; a guest's `home` is its own stream. */
  readonly holders: readonly { readonly jobId: string; readonly home?: string | undefined; readonly lease: LineLease }[];
  /** When each holder's lease was started, by lease id. */
  readonly startedAt: ReadonlyMap<string, number>;
}

/** A key's line as an explanation of `jobId` shows it, from the key's state. */
export const lineOf = ({ stream, state, startedAt }: ExplainStream, jobId: string): LimitLine => {
  const inLine = placeInLine(state, jobId, AHEAD_SHOWN);
  return {
    stream,
    limit: state.limit,
    holding: state.holding,
    paused: state.paused,
    place: inLine?.place ?? null,
    ahead: inLine?.ahead ?? [],
    holders: holders(state).map((h) => ({ jobId: h.jobId, home: h.home, lease: h.lease! })),
    startedAt,
  };
};

export interface ExplainEvent {
  readonly stream: string;
  readonly event: KeyEvent;
  /** For JobParked and LimitWaiting: how the stream's key stood just before. */
  readonly line?: { readonly limit: number; readonly holding: number; readonly paused: boolean };
}

/**
 * running: started by a worker, its lease not run out; unstarted: admitted, no worker has started
 * it yet; expired: started, and its lease ran out (the sweeper takes the slot back); home: the
 * holder is a job of another key under this key's limit, whose lease is kept at its home;
 * worker-gone (explaining now only): started, its lease not run out, but its worker no longer
 * beats (killed, or stopped), so nobody runs it until the lease expires.
 */
export type LeaseState = 'running' | 'unstarted' | 'expired' | 'home' | 'worker-gone';

export interface LeaseView {
  readonly leaseId: string;
  readonly state: LeaseState;
  /** When the slot was taken. */
  readonly heldSince: number;
  readonly workerId: string | null;
  readonly startedAt: number | null;
  readonly expiresAt: number | null;
}

export interface HolderView {
  readonly jobId: string;
  /** A guest's key (as the audit names it); null for the key's own job. */
  readonly home: string | null;
  readonly lease: LeaseView;
}

export interface LimitView {
  readonly key: string;
  /** The job's own key (else one of its further limits). */
  readonly own: boolean;
  readonly limit: number;
  readonly holding: number;
  readonly paused: { readonly by: string; readonly reason: string | null; readonly since: number } | null;
  /** Full or paused: no slot for the job here now. */
  readonly blocking: boolean;
  /** A parked job's place in this key's line (priority, then order): n of m. */
  readonly place: { readonly n: number; readonly of: number } | null;
  /** The first jobs parked ahead of it here (at most AHEAD_SHOWN). */
  readonly ahead: readonly string[];
  readonly holders: readonly HolderView[];
}

/** Why a parked job waited on a key: it was full (holding of limit) or paused. */
export interface WaitedOn {
  readonly key: string;
  readonly why: 'full' | 'paused';
}

/**
 * Why a job was scheduled, as data the page words in its language (`why` is the same in English,
 * for the CLI): a retry after a failed attempt, an expired or revoked lease, given back by its
 * worker, or a runAt given at enqueue.
 */
export type ScheduledBecause =
  | { readonly kind: 'failed'; readonly attempt: number; readonly error: string }
  | { readonly kind: 'yielded'; readonly reason: string | null }
  | { readonly kind: 'expired' }
  | { readonly kind: 'revoked'; readonly by: string }
  | { readonly kind: 'runAt' };

export type Wait =
  | { readonly kind: 'parked'; readonly from: number; readonly until: number | null; readonly ms: number; readonly on: readonly WaitedOn[] }
  | { readonly kind: 'scheduled'; readonly from: number; readonly until: number | null; readonly ms: number; readonly runAt: number; readonly why: string; readonly because: ScheduledBecause };

export type ExplainedStatus = 'unknown' | 'scheduled' | 'parked' | 'holding' | 'running' | 'completed' | 'dead' | 'cancelled' | 'discarded' | 'rejected' | 'replaced';

export interface Explanation {
  readonly jobId: string;
  /** Its home key (the stream's name for a job without a key). */
  readonly key: string;
  readonly asOf: number;
  /** unknown: not enqueued (yet) at that moment. */
  readonly status: ExplainedStatus;
  readonly attempts: number | null;
  readonly maxAttempts: number | null;
  /** Its own key first, then each further limit. */
  readonly limits: readonly LimitView[];
  readonly schedule: { readonly runAt: number; readonly due: boolean; readonly why: string; readonly because: ScheduledBecause } | null;
  readonly holding: { readonly lease: LeaseView; readonly how: 'acquired' | 'promoted'; readonly waitedMs: number } | null;
  readonly ended: { readonly at: number; readonly reason: string | null; readonly by: string | null; readonly lastError: string | null } | null;
  /** Each wait from its events, oldest first; an open one has until null and lasts to asOf. */
  readonly waits: readonly Wait[];
  readonly waited: { readonly parkedMs: number; readonly scheduledMs: number };
}

export const AHEAD_SHOWN = 10;

const ENDINGS: Partial<Record<KeyEvent['type'], ExplainedStatus>> = {
  JobCompleted: 'completed',
  JobDead: 'dead',
  JobCancelled: 'cancelled',
  ParkedDiscarded: 'discarded',
  JobRejected: 'rejected',
  ParkedReplaced: 'replaced',
  DeadDiscarded: 'discarded',
};

/** How a job no state holds ended, from its home events: its last ending, or unknown. */
export const endingOf = (events: readonly KeyEvent[]): { readonly status: ExplainedStatus; readonly event: KeyEvent | undefined } => {
  for (let i = events.length - 1; i >= 0; i--) {
    const e = events[i]!;
    if (e.type === 'JobRetried') break;
    const status = ENDINGS[e.type];
    if (status !== undefined) return { status, event: e };
  }
  return { status: 'unknown', event: undefined };
};

/** The moment explained, and (now only) who is alive at it. */
type Moment = Pick<ExplainInput, 'asOf' | 'liveWorkers'>;

export const leaseStateOf = (lease: LineLease, { asOf, liveWorkers }: Moment): LeaseState =>
  lease.workerId === null
    ? 'unstarted'
    : lease.expiresAt !== null && lease.expiresAt <= asOf
      ? 'expired'
      : liveWorkers !== undefined && !liveWorkers.has(lease.workerId)
        ? 'worker-gone'
        : 'running';

const leaseView = (startedAt: ReadonlyMap<string, number>, lease: LineLease, guest: boolean, when: Moment): LeaseView => ({
  leaseId: lease.leaseId,
  state: guest ? 'home' : leaseStateOf(lease, when),
  heldSince: lease.acquiredAt,
  workerId: lease.workerId,
  startedAt: startedAt.get(lease.leaseId) ?? null,
  expiresAt: lease.expiresAt,
});

/** Oldest admission first (then by job id): the same order whoever read the line. */
const byAdmission = (a: LimitLine['holders'][number], b: LimitLine['holders'][number]): number =>
  a.lease.acquiredAt - b.lease.acquiredAt || (a.jobId < b.jobId ? -1 : a.jobId > b.jobId ? 1 : 0);

const limitView = (l: LimitLine, own: boolean, when: Moment): LimitView => ({
  key: auditKeyOf(l.stream),
  own,
  limit: l.limit,
  holding: l.holding,
  paused: l.paused === undefined ? null : { by: l.paused.by, reason: l.paused.reason, since: l.paused.at },
  blocking: l.paused !== undefined || l.holding >= l.limit,
  place: l.place,
  ahead: l.ahead,
  holders: [...l.holders].sort(byAdmission).map((h) => ({ jobId: h.jobId, home: h.home === undefined ? null : auditKeyOf(h.home), lease: leaseView(l.startedAt, h.lease, h.home !== undefined, when) })),
});

/** Why a job was scheduled, from its home event just before the JobScheduled. */
const scheduledBecause = (before: KeyEvent | undefined): ScheduledBecause => {
  switch (before?.type) {
    case 'JobFailed':
      return { kind: 'failed', attempt: before.data.attempt, error: before.data.error };
    case 'JobYielded':
      return { kind: 'yielded', reason: before.data.reason ?? null };
    case 'LeaseExpired':
      return { kind: 'expired' };
    case 'LeaseRevoked':
      return { kind: 'revoked', by: before.data.by };
    default:
      return { kind: 'runAt' };
  }
};

const becauseInWords = (b: ScheduledBecause): string => {
  switch (b.kind) {
    case 'failed':
      return `retry after attempt ${b.attempt} failed: ${b.error}`;
    case 'yielded':
      return b.reason === null ? 'given back by its worker' : `given back: ${b.reason}`;
    case 'expired':
      return 'retry after its lease expired (its worker went silent)';
    case 'revoked':
      return `retry after its lease was revoked by ${b.by}`;
    case 'runAt':
      return 'due later (runAt at enqueue)';
  }
};

/** Both forms of why a job was scheduled: the data and its English words. */
const scheduledWhy = (before: KeyEvent | undefined): { why: string; because: ScheduledBecause } => {
  const because = scheduledBecause(before);
  return { why: becauseInWords(because), because };
};

/** The job's waits from its events: each parking until its promotion, each schedule until its admission. */
const waitsOf = (input: ExplainInput): Wait[] => {
  const waits: Wait[] = [];
  type Open = { -readonly [K in keyof Wait]: Wait[K] } & Record<string, unknown>;
  let open: Open | undefined;
  let previous: KeyEvent | undefined;
  const close = (at: number) => {
    if (open === undefined) return;
    open.until = at;
    open.ms = at - open.from;
    waits.push(open as Wait);
    open = undefined;
  };
  // The limit keys' lines the job entered with each parking at home (the same append, so the same
  // time): was each of them full or paused?
  const guestLines = new Map<number, WaitedOn[]>();
  for (const { stream, event, line } of input.events) {
    if (event.type !== 'LimitWaiting' || line === undefined) continue;
    const on = guestLines.get(event.data.at) ?? [];
    addBlocked(on, auditKeyOf(stream), line);
    guestLines.set(event.data.at, on);
  }
  for (const { stream, event, line } of input.events) {
    if (stream !== input.home.stream) continue;
    const at = event.data.at;
    switch (event.type) {
      case 'JobParked': {
        close(at);
        const on: WaitedOn[] = [];
        if (line !== undefined) addBlocked(on, auditKeyOf(stream), line);
        open = { kind: 'parked', from: at, until: null, ms: 0, on: [...on, ...(guestLines.get(at) ?? [])] };
        break;
      }
      case 'JobScheduled':
        close(at);
        open = { kind: 'scheduled', from: at, until: null, ms: 0, runAt: event.data.runAt, ...scheduledWhy(previous) };
        break;
      case 'SlotAcquired':
      case 'JobPromoted':
        close(at);
        break;
      default:
        if (ENDINGS[event.type] !== undefined) close(at);
    }
    // The release between a failure (expiry, yield) and its JobScheduled says nothing of why.
    if (event.type !== 'SlotReleased') previous = event;
  }
  if (open !== undefined) waits.push({ ...(open as Wait), ms: input.asOf - open.from });
  return waits;
};

const addBlocked = (on: WaitedOn[], key: string, line: NonNullable<ExplainEvent['line']>): void => {
  if (line.paused) on.push({ key, why: 'paused' });
  else if (line.holding >= line.limit) on.push({ key, why: 'full' });
};

export const explain = (input: ExplainInput): Explanation => {
  const { jobId, asOf, home } = input;
  const job = home.state.jobs[jobId];
  const homeEvents = input.events.filter((e) => e.stream === home.stream).map((e) => e.event);
  const ending = job === undefined ? endingOf(homeEvents) : undefined;
  const status: ExplainedStatus = job === undefined ? ending!.status : job.status === 'holding' ? (job.lease?.workerId != null ? 'running' : 'holding') : (job.status as ExplainedStatus);
  const waits = waitsOf(input);
  const lastWait = waits[waits.length - 1];
  const lastAdmission = [...homeEvents].reverse().find((e) => e.type === 'SlotAcquired' || e.type === 'JobPromoted');
  const lastError = [...homeEvents].reverse().find((e) => e.type === 'JobFailed');
  const sum = (kind: Wait['kind']) => waits.filter((w) => w.kind === kind).reduce((n, w) => n + w.ms, 0);
  const e = ending?.event;
  return {
    jobId,
    key: auditKeyOf(home.stream),
    asOf,
    status,
    attempts: job?.attempts ?? null,
    maxAttempts: job?.maxAttempts ?? null,
    limits: [limitView(lineOf(home, jobId), true, input), ...input.limits.map((l) => limitView('state' in l ? lineOf(l, jobId) : l, false, input))],
    schedule: job?.status === 'scheduled' && job.runAt !== null ? { runAt: job.runAt, due: job.runAt <= asOf, ...(lastWait?.kind === 'scheduled' ? { why: lastWait.why, because: lastWait.because } : scheduledWhy(undefined)) } : null,
    holding:
      job?.lease != null
        ? { lease: leaseView(home.startedAt, job.lease, false, input), how: lastAdmission?.type === 'JobPromoted' ? 'promoted' : 'acquired', waitedMs: lastAdmission?.type === 'JobPromoted' ? lastAdmission.data.waitedMs : 0 }
        : null,
    ended:
      e === undefined
        ? null
        : {
            at: e.data.at,
            reason: e.type === 'JobDead' || e.type === 'JobRejected' ? e.data.reason : null,
            by: 'by' in e.data ? e.data.by : null,
            lastError: lastError?.type === 'JobFailed' ? lastError.data.error : null,
          },
    waits,
    waited: { parkedMs: sum('parked'), scheduledMs: sum('scheduled') },
  };
};

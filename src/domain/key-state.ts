import * as t from 'io-ts';
import type { KeyEvent } from './events.js';

// The state of one concurrency key, folded from its stream. Only jobs that are not finished are
// kept: a key may see millions of jobs, its state holds those still scheduled, parked or holding.
// The state is plain JSON so it can be snapshotted (KeyStateCodec checks a snapshot on load).

const Lease = t.type({
  leaseId: t.string,
  /** When the slot was taken (acquired or promoted). */
  acquiredAt: t.number,
  expiresAt: t.number,
  /** Set by JobStarted; null until a worker starts the job under this lease. */
  workerId: t.union([t.string, t.null]),
});
export type Lease = t.TypeOf<typeof Lease>;

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

const JobState = t.type({
  status: JobStatus,
  priority: t.number,
  /** Enqueue order within the key; ties between equal priorities go to the lower one. */
  seq: t.number,
  /** Starts so far (a refused or yielded admission is not an attempt). */
  attempts: t.number,
  maxAttempts: t.number,
  leaseMs: t.number,
  /** When a scheduled job is due; null otherwise. */
  runAt: t.union([t.number, t.null]),
  /** When a parked job was parked; null otherwise. */
  parkedAt: t.union([t.number, t.null]),
  lease: t.union([Lease, t.null]),
});
export type JobState = t.TypeOf<typeof JobState>;

export const KeyStateCodec = t.type({
  /** 0 until the key's first KeyLimitSet. */
  limit: t.number,
  leaseMs: t.number,
  nextSeq: t.number,
  /** Admissions so far: numbers the lease ids, so each admission's lease is distinct. */
  admissions: t.number,
  jobs: t.record(t.string, JobState),
});
export type KeyState = t.TypeOf<typeof KeyStateCodec>;

export const initialKeyState: KeyState = { limit: 0, leaseMs: 0, nextSeq: 0, admissions: 0, jobs: {} };

export type JobEntry = JobState & { readonly jobId: string };

const entries = (state: KeyState): JobEntry[] =>
  Object.entries(state.jobs).map(([jobId, job]) => ({ ...job, jobId }));

export const jobsIn = (state: KeyState, status: JobStatus): JobEntry[] =>
  entries(state).filter((j) => j.status === status);

export const holders = (state: KeyState): JobEntry[] => entries(state).filter((j) => j.lease !== null);

/** Promotion order: smaller priority first, then enqueue order. */
export const byPromotionOrder = (a: JobEntry, b: JobEntry): number => a.priority - b.priority || a.seq - b.seq;

export const parkedInOrder = (state: KeyState): JobEntry[] => jobsIn(state, 'parked').sort(byPromotionOrder);

const withJob = (state: KeyState, jobId: string, update: (job: JobState) => JobState | undefined): KeyState => {
  const job = state.jobs[jobId];
  if (job === undefined) return state;
  const next = update(job);
  const jobs = { ...state.jobs };
  if (next === undefined) delete jobs[jobId];
  else jobs[jobId] = next;
  return { ...state, jobs };
};

/** A finished job leaves the state once it holds no slot. */
const finish = (job: JobState): JobState | undefined =>
  job.lease === null ? undefined : { ...job, status: 'finishing' };

export const evolve = (state: KeyState, event: KeyEvent): KeyState => {
  switch (event.type) {
    case 'KeyLimitSet':
      return { ...state, limit: event.data.limit, leaseMs: event.data.leaseMs };
    case 'JobEnqueued': {
      const d = event.data;
      return {
        ...state,
        nextSeq: state.nextSeq + 1,
        jobs: {
          ...state.jobs,
          [d.jobId]: {
            status: 'pending',
            priority: d.priority,
            seq: state.nextSeq,
            attempts: 0,
            maxAttempts: d.maxAttempts,
            leaseMs: d.leaseMs,
            runAt: null,
            parkedAt: null,
            lease: null,
          },
        },
      };
    }
    case 'SlotAcquired':
    case 'JobPromoted': {
      const { leaseId, expiresAt, at } = event.data;
      return withJob({ ...state, admissions: state.admissions + 1 }, event.data.jobId, (job) => ({
        ...job,
        status: 'holding',
        runAt: null,
        parkedAt: null,
        lease: { leaseId, acquiredAt: at, expiresAt, workerId: null },
      }));
    }
    case 'JobParked':
      return withJob(state, event.data.jobId, (job) => ({
        ...job,
        status: 'parked',
        runAt: null,
        parkedAt: event.data.at,
      }));
    case 'JobScheduled':
      return withJob(state, event.data.jobId, (job) => ({
        ...job,
        status: 'scheduled',
        runAt: event.data.runAt,
        parkedAt: null,
      }));
    case 'JobStarted': {
      const { attempt, workerId, expiresAt } = event.data;
      return withJob(state, event.data.jobId, (job) => ({
        ...job,
        attempts: attempt,
        lease: job.lease && { ...job.lease, workerId, expiresAt },
      }));
    }
    case 'LeaseRenewed':
      return withJob(state, event.data.jobId, (job) => ({
        ...job,
        lease: job.lease && { ...job.lease, expiresAt: event.data.expiresAt },
      }));
    case 'JobYielded':
      // A yield hands the attempt back: the job did not fail, the worker stopped.
      return withJob(state, event.data.jobId, (job) => ({
        ...job,
        attempts: job.lease?.workerId != null ? job.attempts - 1 : job.attempts,
      }));
    case 'SlotReleased':
      return withJob(state, event.data.jobId, (job) =>
        job.status === 'finishing' ? undefined : { ...job, status: 'pending', lease: null },
      );
    case 'JobCompleted':
    case 'JobDead':
    case 'JobCancelled':
    case 'ParkedDiscarded':
      return withJob(state, event.data.jobId, finish);
    case 'JobFailed':
    case 'LeaseExpired':
    case 'LeaseRevoked':
      // The SlotReleased that follows in the same append moves the job on.
      return state;
  }
};

export const fold = (state: KeyState, events: readonly KeyEvent[]): KeyState => events.reduce(evolve, state);

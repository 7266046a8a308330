import type { ProjectedEvent, Projection, Statement } from './projection.js';
import { isLedgerStream, statement } from './projection.js';

/** The dispatcher's projection name. */
export const DISPATCHER = 'dispatcher';

/**
 * NOTIFY channel on which the dispatcher announces a lease taken from its holder (LeaseRevoked,
 * LeaseExpired; the payload is the lease id), at the commit that takes it: the worker running it
 * aborts the handler's signal at once instead of at its next renewal (up to lease/3 later). A
 * hint: a notice lost with a listening connection leaves that to the renewal.
 */
export const LEASE_LOST_CHANNEL = 'jobledger_lease_lost';

/** NOTIFY channel of admissions: the payload is the queue whose jobs were admitted (src/adapters/queue/job-queue.ts listens). */
export const QUEUE_CHANNEL = 'jobledger_queue';

/**
 * The dispatcher: a projection whose effects are what the job's row cannot do by itself. Since
 * migration 0015 an admitted job's jl_jobs row is its dispatch message (the read models write
 * it), and a worker claims it in the transaction that starts it; the dispatcher, after the read
 * models in the same batch:
 * - wakes the readers of each queue with admissions left unstarted at the end of the batch
 *   (NOTIFY at the commit: a reader woken then finds the rows committed);
 * - announces each lease taken from its holder (LeaseRevoked, LeaseExpired) on
 *   LEASE_LOST_CHANNEL, so its worker aborts the handler at once instead of at its next renewal;
 * - returns what the worker of a job started by direct handoff (an admission started in the same
 *   transaction: Complete/Fail with handOffTo) needs to run it (`returns: 'handedOff'`).
 * It has no `rebuild`: replaying it would only notify again. Rebuilding the read models makes the
 * rows of admitted jobs claimable again, once each (one row per job: there is no message to send
 * twice).
 */
export const createDispatcher = (): Projection => ({
  name: DISPATCHER,
  handles: isLedgerStream,
  project: projectDispatch,
});

export const projectDispatch = (events: readonly ProjectedEvent[]): readonly Statement[] => {
  const admitted = new Map<string, { readonly jobId: string; readonly stream: string; readonly commit: bigint }>();
  const handedOff: { readonly jobId: string; readonly stream: string }[] = [];
  const lost: string[] = [];
  for (const { event, stream, commit } of events) {
    switch (event.type) {
      case 'SlotAcquired':
      case 'JobPromoted':
        admitted.set(event.data.leaseId, { jobId: event.data.jobId, stream, commit });
        break;
      case 'JobStarted': {
        // Started in the very transaction that admitted it: its worker runs it already.
        const { leaseId } = event.data;
        if (admitted.get(leaseId)?.commit === commit) handedOff.push({ jobId: event.data.jobId, stream });
        admitted.delete(leaseId);
        break;
      }
      case 'SlotReleased':
        admitted.delete(event.data.leaseId);
        break;
      case 'LeaseExpired':
      case 'LeaseRevoked':
        lost.push(event.data.leaseId);
        break;
      default:
        break;
    }
  }
  const out: Statement[] = [];
  if (admitted.size > 0) {
    const woken = [...admitted.values()];
    out.push(statement(WAKE_SQL, [...new Set(woken.map((a) => a.jobId))], [...new Set(woken.map((a) => a.stream))]));
  }
  if (lost.length > 0) out.push(statement(LEASE_LOST_SQL, lost));
  if (handedOff.length > 0) out.push({ ...statement(HANDED_OFF_SQL, handedOff.map((h) => h.jobId), [...new Set(handedOff.map((h) => h.stream))]), returns: 'handedOff' });
  return out;
};

/**
 * One NOTIFY per queue with admissions (PostgreSQL folds identical notifications of a transaction
 * into one). $1 the admitted jobs, $2 their streams (on a distributed ledger, the shards to read;
 * there the wake-up is WAKE_QUEUES_SQL's, below).
 */
export const WAKE_SQL = `SELECT pg_notify('${QUEUE_CHANNEL}', q.queue) FROM (SELECT DISTINCT queue FROM jl_jobs WHERE job_id = ANY($1::text[]) AND stream = ANY($2::text[])) q`;

/**
 * WAKE_SQL on a distributed ledger, in two parts: a statement Citus plans on the admitted jobs'
 * shards runs all of itself there, pg_notify included, and a NOTIFY on a worker is heard by
 * nobody and fails a two-phase commit. There the queues are read in the transaction
 * (WAKE_QUEUES_SQL) and notified by the coordinator once it has committed (NOTIFY_QUEUES_SQL): a
 * reader woken then finds the rows committed, as at the commit; a process that dies in between
 * leaves the wake-up to the readers' polling.
 */
export const WAKE_QUEUES_SQL = `SELECT DISTINCT queue FROM jl_jobs WHERE job_id = ANY($1::text[]) AND stream = ANY($2::text[])`;
export const NOTIFY_QUEUES_SQL = `SELECT pg_notify('${QUEUE_CHANNEL}', q) FROM unnest($1::text[]) AS q`;

/** What a worker needs to run a job started by direct handoff (its admission got no message). $1 the jobs, $2 their streams (on a distributed ledger, the shards to read). */
export const HANDED_OFF_SQL = `SELECT job_id AS "jobId", key, name, args FROM jl_jobs WHERE job_id = ANY($1::text[]) AND stream = ANY($2::text[])`;

export const LEASE_LOST_SQL = `SELECT pg_notify('${LEASE_LOST_CHANNEL}', lease) FROM unnest($1::text[]) AS lease`;

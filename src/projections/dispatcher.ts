import type { KeyEvent } from '../domain/events.js';
import { isLedgerStream, statement, type ProjectedEvent, type Projection, type Statement } from './projection.js';

/** The dispatcher's projection name (projection_streams). */
export const DISPATCHER = 'dispatcher';

/**
 * NOTIFY channel on which the dispatcher announces a lease taken from its holder (LeaseRevoked,
 * LeaseExpired; the payload is the lease id), at the commit that takes it: the worker running it
 * aborts the handler's signal at once instead of at its next renewal (up to lease/3 later). A
 * hint: a notice lost with a listening connection leaves that to the renewal, as before.
 */
export const LEASE_LOST_CHANNEL = 'jobledger_lease_lost';

/** What the dispatcher puts on the job's queue for each admission (SlotAcquired, JobPromoted). */
export interface DispatchMessage {
  readonly jobId: string;
  /** null for a job without a concurrency key. */
  readonly key: string | null;
  /** The lease the worker must Start/Renew/Complete/Fail with. */
  readonly leaseId: string;
  readonly name: string;
  readonly args: unknown;
  /** Starts so far + 1: the attempt this admission will be if the worker starts it. */
  readonly attempt: number;
}

/**
 * The dispatcher: a projection whose effect is queue messages. Each SlotAcquired and JobPromoted
 * becomes exactly one DispatchMessage on the job's queue, sent in the transaction that records the
 * dispatcher's stream revision (inline: the append itself), so a message exists if and only if its
 * admission does, once — except an admission started in the same append (a direct handoff,
 * Complete/Fail with handOffTo): its worker already runs it, and a message would only be fenced as
 * AlreadyStarted. If that worker dies, the lease expires and the retry is a new admission with its
 * own message. (Applied asynchronously, a batch may end between the two events; the message then
 * sent is fenced and archived by the worker that reads it.)
 *
 * What a message needs (name, args, queue, attempts) came with earlier events of the job, so the
 * dispatcher keeps its own table, dispatch_jobs, of the unfinished jobs, written only here: it
 * never reads the read models, which have a checkpoint of their own and may be being rebuilt.
 *
 * It has no `rebuild`: replaying it would send every message again. Its admission statement
 * returns the message as a row (queue, message); the runner hands those rows to its
 * SendMessages (PgQueue.sendBatch on the same transaction), so the mapping stays pure and the
 * queue's SQL stays in the queue adapter.
 */
export const createDispatcher = (): Projection => ({
  name: DISPATCHER,
  handles: isLedgerStream,
  project: projectDispatch,
  forBatch: (events) => {
    const started = new Set(events.flatMap((pe) => (pe.event.type === 'JobStarted' ? [startKey(pe, pe.event.data.leaseId)] : [])));
    return (pe) => (isAdmission(pe.event) && started.has(startKey(pe, pe.event.data.leaseId)) ? [] : projectDispatch(pe));
  },
});

/** A lease within one append (one transaction): a handoff starts its admission in the append that made it. */
const startKey = (pe: ProjectedEvent, leaseId: string): string => `${pe.position.commit}/${leaseId}`;

const isAdmission = (event: KeyEvent): event is Extract<KeyEvent, { type: 'SlotAcquired' | 'JobPromoted' }> =>
  event.type === 'SlotAcquired' || event.type === 'JobPromoted';

/**
 * What a worker needs to run jobs it started by direct handoff (their admissions got no message):
 * read from dispatch_jobs, which holds every unfinished job. Only right after the append that
 * started them with inline projections: asynchronously applied, the row could lag.
 */
export const HANDED_OFF_SQL = `SELECT job_id AS "jobId", key, name, args FROM dispatch_jobs WHERE job_id = ANY($1::text[])`;

export const projectDispatch = ({ event, stream, key }: ProjectedEvent): readonly Statement[] => {
  switch (event.type) {
    case 'JobEnqueued': {
      const d = event.data;
      return [
        statement(
          `INSERT INTO dispatch_jobs (job_id, stream, key, queue, name, args, attempts) VALUES ($1, $2, $3, $4, $5, $6::jsonb, 0)`,
          d.jobId,
          stream,
          key,
          d.queue,
          d.name,
          JSON.stringify(d.args ?? null),
        ),
      ];
    }
    case 'SlotAcquired':
    case 'JobPromoted':
      return [
        {
          ...statement(
            `SELECT queue, jsonb_build_object('jobId', job_id, 'key', key, 'leaseId', $2::text, 'name', name, 'args', args, 'attempt', attempts + 1) AS message
             FROM dispatch_jobs WHERE job_id = $1`,
            event.data.jobId,
            event.data.leaseId,
          ),
          // A missing row would be an admission without a message: a job that never runs.
          expectRows: 1,
          emits: 'messages',
        },
      ];
    case 'JobStarted':
      return [
        statement(`UPDATE dispatch_jobs SET attempts = $2, started_lease_id = $3 WHERE job_id = $1`, event.data.jobId, event.data.attempt, event.data.leaseId),
      ];
    case 'JobYielded':
      // A yield hands the attempt back only if the job was started under the lease it yields.
      return [
        statement(
          `UPDATE dispatch_jobs SET attempts = attempts - 1, started_lease_id = NULL WHERE job_id = $1 AND started_lease_id = $2`,
          event.data.jobId,
          event.data.leaseId,
        ),
      ];
    case 'JobCompleted':
    case 'JobDead':
    case 'JobCancelled':
    case 'ParkedDiscarded':
      // Finished: no admission can follow.
      return [statement(`DELETE FROM dispatch_jobs WHERE job_id = $1`, event.data.jobId)];
    case 'LeaseExpired':
    case 'LeaseRevoked':
      return [statement(`SELECT pg_notify('${LEASE_LOST_CHANNEL}', $1)`, event.data.leaseId)];
    case 'KeyLimitSet':
    case 'JobParked':
    case 'JobScheduled':
    case 'LeaseRenewed':
    case 'JobFailed':
    case 'SlotReleased':
      return [];
  }
};

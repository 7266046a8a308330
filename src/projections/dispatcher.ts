import type { ProjectedEvent, Projection, Statement } from './projection.js';
import { isLedgerStream, statement } from './projection.js';

export type { DispatchMessage } from '../domain/ports/ledger-store.js';

/** The dispatcher's projection name. */
export const DISPATCHER = 'dispatcher';

/**
 * NOTIFY channel on which the dispatcher announces a lease taken from its holder (LeaseRevoked,
 * LeaseExpired; the payload is the lease id), at the commit that takes it: the worker running it
 * aborts the handler's signal at once instead of at its next renewal (up to lease/3 later). A
 * hint: a notice lost with a listening connection leaves that to the renewal.
 */
export const LEASE_LOST_CHANNEL = 'jobledger_lease_lost';

/**
 * What the dispatcher needs of the queue, as statements it can put in the batch's transaction
 * (src/adapters/queue/pg-queue.ts implements it, so the queue's SQL stays in the queue adapter).
 */
export interface DispatchQueue {
  /**
   * Sends the rows of `source` as messages: `source` is a SELECT using only $1 that yields
   * (queue text, message jsonb, ord bigint), sent in ord order. A NULL queue or message fails
   * the statement (an admission without a message would be a job that never runs).
   */
  send(source: Statement): Statement;
  /** Moves these messages to the archive (those still in the queue): a message nobody can run, kept as evidence. */
  archive(msgIds: readonly string[]): Statement;
  /** Deletes these messages (those still in the queue): their lease ended, and the ledger records it. */
  remove(msgIds: readonly string[]): Statement;
  /** Makes each message visible again `ms` after the statement. */
  setVisibility(entries: readonly { readonly msgId: string; readonly ms: number }[]): Statement;
}

/**
 * The dispatcher: a projection whose effect is queue messages. Each SlotAcquired and JobPromoted
 * becomes exactly one DispatchMessage on the job's queue, sent in the transaction that applies
 * the event (inline: the append itself), so a message exists if and only if its admission does,
 * once — except:
 * - an admission started in the same transaction (direct handoff, Complete/Fail with handOffTo):
 *   its worker runs it already; instead, the batch returns the job's name and args for that
 *   worker (`returns: 'handedOff'`). If that worker dies, the lease expires and the retry is a
 *   new admission with its own message;
 * - an admission released within the batch (cancelled, revoked before anyone read it): nothing
 *   could run it.
 * The message then follows its lease: the read that starts it hides it for at least the lease
 * (the message carries leaseMs), a LeaseRenewed naming it moves its visibility to the lease's
 * expiry, and the SlotReleased naming it deletes it, in the same transaction. So a message
 * reappears only when its worker has gone silent for a whole lease. Deleted, not archived (issue
 * 22): the SlotReleased already says which message its lease ended, and a copy in queue_archive
 * cost a row version and an index entry per job in a table nothing read.
 *
 * The message's name, args and attempt come from jl_jobs, in the same transaction, after the read
 * models' statements: the dispatcher runs after them, in their batch (inline, or one async runner
 * applying both under one checkpoint). It has no `rebuild`: replaying it would send every message
 * again.
 */
export const createDispatcher = (queue: DispatchQueue): Projection => ({
  name: DISPATCHER,
  handles: isLedgerStream,
  project: (events) => projectDispatch(queue, events),
});

export const projectDispatch = (queue: DispatchQueue, events: readonly ProjectedEvent[]): readonly Statement[] => {
  const admitted = new Map<string, { readonly job_id: string; readonly lease_id: string; readonly commit: bigint }>();
  const handedOff: string[] = [];
  const remove = new Set<string>();
  const visibility = new Map<string, number>();
  const lost: string[] = [];
  for (const { event, commit } of events) {
    switch (event.type) {
      case 'SlotAcquired':
      case 'JobPromoted':
        admitted.set(event.data.leaseId, { job_id: event.data.jobId, lease_id: event.data.leaseId, commit });
        break;
      case 'JobStarted': {
        // Its message (if any) was read in this very transaction, hidden for at least the lease: nothing to move.
        const { leaseId } = event.data;
        if (admitted.get(leaseId)?.commit === commit) {
          admitted.delete(leaseId);
          handedOff.push(event.data.jobId);
        }
        break;
      }
      case 'LeaseRenewed':
        if (event.data.msgId !== undefined) visibility.set(event.data.msgId, event.data.expiresAt - event.data.at);
        break;
      case 'SlotReleased':
        admitted.delete(event.data.leaseId);
        if (event.data.msgId !== undefined) {
          remove.add(event.data.msgId);
          visibility.delete(event.data.msgId);
        }
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
  if (admitted.size > 0) out.push(queue.send(statement(ADMISSION_MESSAGES_SQL, JSON.stringify([...admitted.values()].map(({ job_id, lease_id }) => ({ job_id, lease_id }))))));
  if (visibility.size > 0) out.push(queue.setVisibility([...visibility].map(([msgId, ms]) => ({ msgId, ms }))));
  if (remove.size > 0) out.push(queue.remove([...remove]));
  if (lost.length > 0) out.push(statement(LEASE_LOST_SQL, lost));
  if (handedOff.length > 0) out.push({ ...statement(HANDED_OFF_SQL, handedOff), returns: 'handedOff' });
  return out;
};

// The message of each admission, built from its job's row as the read models left it in this
// batch (attempt = starts so far + 1). The LEFT JOIN is on purpose: a job missing from jl_jobs
// gives a NULL queue and message, which fail the send instead of being skipped.
export const ADMISSION_MESSAGES_SQL = `
SELECT j.queue,
       CASE WHEN j.job_id IS NOT NULL THEN jsonb_build_object(
         'jobId', j.job_id, 'key', j.key, 'leaseId', a.lease_id, 'name', j.name, 'args', j.args, 'attempt', j.attempts + 1, 'leaseMs', j.lease_ms)
       END AS message,
       a.ord
FROM ROWS FROM (jsonb_to_recordset($1::jsonb) AS (job_id text, lease_id text)) WITH ORDINALITY AS a (job_id, lease_id, ord)
LEFT JOIN LATERAL (SELECT * FROM jl_jobs WHERE jl_jobs.job_id = a.job_id) j ON true`;

/** What a worker needs to run a job started by direct handoff (its admission got no message). */
export const HANDED_OFF_SQL = `SELECT job_id AS "jobId", key, name, args FROM jl_jobs WHERE job_id = ANY($1::text[])`;

export const LEASE_LOST_SQL = `SELECT pg_notify('${LEASE_LOST_CHANNEL}', lease) FROM unnest($1::text[]) AS lease`;

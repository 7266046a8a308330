import type { Claim } from '../../domain/ports/ledger-store.js';
import { QueueName } from '../../domain/values.js';
import { QUEUE_CHANNEL } from '../../projections/dispatcher.js';
import type { Statement } from '../../projections/projection.js';
import type { Notifications } from '../postgres/listener.js';

/**
 * The dispatch queue (migration 0015): a job's jl_jobs row is its message. An admission (the
 * read-model projection setting status 'holding') sends it, and the dispatcher NOTIFYs its queue
 * at that commit; a worker's read claims it in the key writer's transaction that starts it
 * (CLAIM_SQL); its start, renewals and release are the projection's updates of the same row, and
 * the row leaves the queue when its job no longer holds an unstarted admission. Delivery rests on
 * the ledger, not on the queue: a Start is decided on the key's state, so a job is started once
 * per lease however often its row is read.
 */

/** A queue name that is not a QueueName (the domain's one rule: 1-63 letters, digits, "_", "." or "-", not starting with "." or "-"). Nothing was written. */
export class InvalidQueueNameError extends RangeError {
  override readonly name = 'InvalidQueueNameError';
  constructor(readonly queue: unknown) {
    super(
      `Invalid queue name ${JSON.stringify(queue)}: \`queue\` must be 1-63 characters, each a letter, digit, "_", "." or "-", the first not "." or "-"`,
    );
  }
}

export function checkQueue(queue: string): void {
  if (typeof queue !== 'string' || !QueueName.is(queue)) throw new InvalidQueueNameError(queue);
}

/** Wake-ups of a dispatch queue: one per commit that admitted jobs on it (the dispatcher's NOTIFY). */
export class JobQueue {
  /** `notifications`: the process's shared LISTEN connection. */
  constructor(private readonly notifications: Notifications) {}

  /**
   * Calls `wake` when jobs of `queue` are admitted (NOTIFY, delivered at the admitting commit;
   * never for a rolled-back one), once the subscription is listening, and after each reconnect of
   * the listening connection, since notifications may have been missed: a reader can simply read
   * whenever woken. A hint: polling stays the reader's fallback. `wake` must not throw.
   */
  listen(queue: string, wake: () => void): { stop(): Promise<void> } {
    checkQueue(queue);
    // undefined: (re)connected, anything may have been missed.
    return this.notifications.listen(QUEUE_CHANNEL, (payload) => (payload === undefined || payload === queue ? wake() : undefined));
  }
}

// The key writer's read: $1 queue, $2 how many, $3 streams and $4 jobs to pass over (Claim).
// Oldest admission first, the order of jl_jobs_claim, so the scan starts at the first claimable row
// and stops after $2.
//
// The row locks of FOR UPDATE SKIP LOCKED are what keep two readers off the same job: they last
// until the end of the writer's transaction, which decides each Start on the key's state and
// whose projection then moves the row out of 'holding'. The status condition MUST stay in this
// locking statement: a row another transaction changed and committed after our snapshot is
// checked again on its new version (EvalPlanQual) and dropped if it is no longer claimable.
// A lock here can meet an UPDATE of the same row by a flush that holds the job's stream (an
// operator cancelling or releasing that very admission) while this transaction waits for the
// stream: PostgreSQL breaks such a deadlock by failing one of the two, and the key writer runs
// it again (TransientWriteError). Nothing else updates a claimable row.
export const CLAIM_SQL = `
SELECT job_id AS "jobId", key, stream, lease_id AS "leaseId", name, args, attempts + 1 AS attempt, lease_ms AS "leaseMs"
FROM jl_jobs
WHERE queue = $1 AND status = 'holding' AND stream <> ALL ($3::text[]) AND job_id <> ALL ($4::text[])
ORDER BY acquired_at
LIMIT $2
FOR UPDATE SKIP LOCKED`;

/** A worker's read as a statement of the key writer's transaction. */
export const claimStatement = (claim: Claim): Statement => {
  checkQueue(claim.queue);
  if (!Number.isSafeInteger(claim.qty) || claim.qty < 1) throw new RangeError(`qty must be a positive integer, got ${claim.qty}`);
  return { text: CLAIM_SQL, values: [claim.queue, claim.qty, claim.skipStreams, claim.skipJobs] };
};

// A claim on a distributed ledger (Citus), where FOR UPDATE must stay on one shard and a queue's
// rows are on every shard (PgWriteTransaction.claimOnShards): the candidates first, unlocked,
// across the shards: the oldest claimable admissions, twice as many as asked for plus a few (a
// reader running beside this one may lock some first); then each shard's candidates, locked.
export const CLAIM_CANDIDATES_SQL = `
SELECT job_id AS "jobId", stream
FROM jl_jobs
WHERE queue = $1 AND status = 'holding' AND stream <> ALL ($3::text[]) AND job_id <> ALL ($4::text[])
ORDER BY acquired_at
LIMIT $2`;

/** How many candidates a claim of `qty` reads on a distributed ledger. */
const candidatesFor = (qty: number): number => 2 * qty + 8;

export const claimCandidates = (claim: Claim): Statement => {
  // Checks the claim as CLAIM_SQL's statement does.
  claimStatement(claim);
  return { text: CLAIM_CANDIDATES_SQL, values: [claim.queue, candidatesFor(claim.qty), claim.skipStreams, claim.skipJobs] };
};

// $1 queue, $2 one shard's streams, $3 their candidates: those still claimable, locked, as
// CLAIM_SQL locks them (the status condition in the locking statement: a row changed since the
// candidates were read is checked again and dropped), with when each was admitted, the order of
// the claim across shards.
export const CLAIM_ON_SHARD_SQL = `
SELECT job_id AS "jobId", key, stream, lease_id AS "leaseId", name, args, attempts + 1 AS attempt, lease_ms AS "leaseMs", (extract(epoch FROM acquired_at) * 1000)::float8 AS "acquiredAt"
FROM jl_jobs
WHERE stream = ANY($2::text[]) AND job_id = ANY($3::text[]) AND queue = $1 AND status = 'holding'
ORDER BY acquired_at
FOR UPDATE SKIP LOCKED`;

export const claimOnShard = (claim: Claim, streams: readonly string[], jobIds: readonly string[]): Statement => ({ text: CLAIM_ON_SHARD_SQL, values: [claim.queue, streams, jobIds] });

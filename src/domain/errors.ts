// What a decision can refuse. A refusal changes nothing: no event is written.
export type DomainError =
  /** The lease is not (or no longer) the job's: the fencing that stops a reclaimed holder. */
  | { readonly tag: 'StaleLease'; readonly jobId: string; readonly leaseId: string; readonly currentLeaseId: string | null }
  /** A second Start under a lease already started: a duplicate delivery runs nothing. */
  | { readonly tag: 'AlreadyStarted'; readonly jobId: string; readonly leaseId: string; readonly workerId: string }
  /** Complete or Fail before Start under this lease. */
  | { readonly tag: 'NotStarted'; readonly jobId: string; readonly leaseId: string }
  | { readonly tag: 'JobNotFound'; readonly jobId: string }
  | { readonly tag: 'NotHolding'; readonly jobId: string }
  | { readonly tag: 'NotParked'; readonly jobIds: readonly string[] }
  /** An enqueue named a limit other than the key's recorded one (and does not own the limit). `key`: a further limit key of the job, when it is not the job's own key. */
  | { readonly tag: 'LimitMismatch'; readonly recorded: number; readonly requested: number; readonly key?: string }
  /** The job waits or holds on this key as one of its further limits; it belongs to (and is acted on through) its home stream. */
  | { readonly tag: 'HeldElsewhere'; readonly jobId: string; readonly home: string }
  /** A pause of a paused key, or a resume of a running one. */
  | { readonly tag: 'AlreadyPaused'; readonly by: string; readonly reason: string | null }
  | { readonly tag: 'NotPaused' }
  /** A renewal of a lease an operator revoked: its handler must stop (the slot passes on when it has). */
  | { readonly tag: 'LeaseRevoked'; readonly jobId: string; readonly leaseId: string; readonly by: string }
  /** A worker said a handler stopped under a lease nobody revoked: it must complete, fail or yield instead. */
  | { readonly tag: 'NotRevoked'; readonly jobId: string; readonly leaseId: string }
  /** A retry or a discard of a dead job named a job that is not dead (`status`: where it is, or how it ended). */
  | { readonly tag: 'NotDead'; readonly jobId: string; readonly status: string };

export const describeDomainError = (e: DomainError): string => {
  switch (e.tag) {
    case 'StaleLease':
      return `job ${e.jobId}: lease ${e.leaseId} is stale (current lease: ${e.currentLeaseId ?? 'none'}); nothing changed`;
    case 'AlreadyStarted':
      return `job ${e.jobId}: lease ${e.leaseId} was already started by worker ${e.workerId}; nothing changed`;
    case 'NotStarted':
      return `job ${e.jobId}: lease ${e.leaseId} was never started; nothing changed`;
    case 'JobNotFound':
      return `job ${e.jobId} is not scheduled, parked or holding a slot on this key`;
    case 'LeaseRevoked':
      return `job ${e.jobId}: lease ${e.leaseId} was revoked by ${e.by}; its handler must stop (the slot passes on when it has, or when the lease lapses)`;
    case 'NotRevoked':
      return `job ${e.jobId}: lease ${e.leaseId} was not revoked; a handler that ended reports complete, fail or yield; nothing changed`;
    case 'NotHolding':
      return `job ${e.jobId} holds no slot on this key`;
    case 'NotParked':
      return `jobs not parked on this key: ${e.jobIds.join(', ')}`;
    case 'AlreadyPaused':
      return `the key is already paused (by ${e.by}${e.reason === null ? '' : `: ${e.reason}`}); nothing changed`;
    case 'NotPaused':
      return 'the key is not paused; nothing changed';
    case 'NotDead':
      return `job ${e.jobId} is ${e.status}, not dead: only a dead job is retried or discarded as dead; nothing changed`;
    case 'HeldElsewhere':
      return `job ${e.jobId} is under this key's limit but belongs to ${e.home}: act on it there; nothing changed`;
    case 'LimitMismatch':
      if (e.key !== undefined) return `limit key ${JSON.stringify(e.key)} has limit ${e.recorded}, not ${e.requested}: a key keeps the limit its first enqueue set; change it with set-limit; nothing was written`;
      return `the key's limit is ${e.recorded}, not ${e.requested}: a key keeps the limit its first enqueue set; change it with set-limit (or enqueue from a job definition that owns the limit); nothing was written`;
  }
};

/** No such concurrency key: its stream has no event. */
export class UnknownKeyError extends Error {
  override readonly name = 'UnknownKeyError';
  constructor(readonly key: string) {
    super(`key ${JSON.stringify(key)}: unknown (no job was ever enqueued with it)`);
  }
}

/** No such job in the jobs read model. */
export class UnknownJobError extends Error {
  override readonly name = 'UnknownJobError';
  constructor(readonly jobId: string) {
    super(`job ${JSON.stringify(jobId)}: unknown`);
  }
}

/** The decider refused a command (an operator's, or an enqueue's); nothing was written. `stream`: the stream it was decided on, when the caller did not name it. */
export class RefusedError extends Error {
  override readonly name: string = 'RefusedError';
  constructor(
    readonly error: DomainError,
    readonly stream?: string,
    message = describeDomainError(error),
  ) {
    super(message);
  }
}

/**
 * A process was opened with a queue cap the ledger holds otherwise: the ledger's cap stands for
 * every process, and changing it is an operator's action (set-limit on queue:<name>), audited.
 */
export class QueueCapConflictError extends Error {
  override readonly name = 'QueueCapConflictError';
  constructor(
    readonly queue: string,
    readonly recorded: number,
    readonly configured: number,
  ) {
    super(
      `queue ${JSON.stringify(queue)} has cap ${recorded} in the ledger, not ${configured} as this process's configuration (queues, --queue-cap or JOBLEDGER_QUEUES) says: ` +
        `the ledger's cap holds for every process; change it with \`jobledger set-limit --key queue:${queue} --limit ${configured} --by <you>\` (recorded with who), or fix the configuration. Nothing was written`,
    );
  }
}

/** An enqueue named a limit other than its key's recorded one: the whole enqueue (every job of the batch) was refused. */
export class LimitConflictError extends RefusedError {
  override readonly name = 'LimitConflictError';
  constructor(
    readonly key: string,
    readonly recorded: number,
    readonly requested: number,
    stream?: string,
  ) {
    super(
      { tag: 'LimitMismatch', recorded, requested },
      stream,
      `key ${JSON.stringify(key)} has limit ${recorded}, not ${requested}: a key keeps the limit its first enqueue set; change it with set-limit or ledger.setLimit (or enqueue from a job definition that owns the limit). Nothing was enqueued`,
    );
  }
}

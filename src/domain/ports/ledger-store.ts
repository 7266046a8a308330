import type { KeyEvent } from '../events.js';
import type { EventDecodeError } from '../recorded.js';
import type { EventToAppend, GlobalPosition, JsonObject, RecordedEvent, Snapshot, StreamAppend, StreamRevision } from './event-store.js';

// The key writer's port: one transaction that reads dispatch messages, locks the streams it is
// about to decide on, and writes every append of a flush together with what the inline
// projections make of it. src/adapters/eventstore/postgres/write-transaction.ts implements it.

/**
 * An admitted job as a worker claims it: what its jl_jobs row (the dispatch message, migration
 * 0015) says it needs to start and run it.
 */
export interface DispatchMessage {
  readonly jobId: string;
  /** null for a job without a concurrency key. */
  readonly key: string | null;
  /** Where the job is recorded: the stream its Start is decided on. */
  readonly stream: string;
  /** The lease the worker must Start/Renew/Complete/Fail with. */
  readonly leaseId: string;
  readonly name: string;
  readonly args: unknown;
  /** Starts so far + 1: the attempt this admission will be if the worker starts it. */
  readonly attempt: number;
  /** The job's lease. */
  readonly leaseMs: number;
}

/**
 * A worker's read: up to `qty` admitted jobs of `queue` nobody started, claimed (row-locked, other
 * readers skip them) until the transaction ends, which starts them. The skips are jobs the reader
 * knows it cannot start now: streams another of its flushes is deciding on or that it found
 * unreadable, jobs whose Start it was refused a moment ago (an async read model behind the ledger).
 */
export interface Claim {
  readonly queue: string;
  readonly qty: number;
  readonly skipStreams: readonly string[];
  readonly skipJobs: readonly string[];
}

/** Lock a stream and bring its state up to date from `after` (the revision the caller's state is at; absent: read nothing, only lock). */
export interface LockRequest {
  readonly stream: string;
  readonly after?: StreamRevision | 'no_stream';
}

/** Where a stream stood once the transaction held it. */
export interface LockedStream {
  readonly stream: string;
  readonly revision: StreamRevision | 'no_stream';
  /** A snapshot newer than `after`, when the store has one: fold `events` onto it instead. */
  readonly snapshot: Snapshot | undefined;
  /** Every event after `after` (or after the snapshot), in revision order. */
  readonly events: readonly RecordedEvent[];
  /**
   * The stream's last writer has a newer transaction id than this transaction: events appended
   * here would sort before that writer's in the global order although they follow them in the
   * stream. It must be written in a later transaction (the key writer's next flush).
   */
  readonly deferred: boolean;
}

/** A job started by direct handoff: its admission got no message, so the commit says what to run. */
export interface HandedOffJob {
  readonly jobId: string;
  readonly key: string | null;
  readonly name: string;
  readonly args: unknown;
}

/** An event of a flush's append. */
export interface DecidedEvent extends EventToAppend {
  /**
   * Its id must be unique across the ledger: the commit fails with DuplicateEventIdError when it
   * is recorded already (a JobEnqueued whose job id the flush did not make up). Other ids are
   * not checked: they are random, or the id of an event only this append can hold.
   */
  readonly unique?: boolean;
}

/** An append of a flush; `decided`: its events as the decider made them, so the inline projections need not decode them again. */
export interface DecidedAppend extends StreamAppend {
  readonly events: readonly DecidedEvent[];
  readonly decided?: readonly KeyEvent[];
}

export interface Commit {
  /** One per stream, each expecting the revision it was locked at. */
  readonly appends: readonly DecidedAppend[];
  /** The streams the flush stopped at, and why: recorded as the key writer's quarantines, in this transaction. */
  readonly quarantine?: readonly EventDecodeError[];
  readonly snapshots?: readonly Snapshot[];
  /** Report where each written event sits (positionOf); a flush needs none. */
  readonly positions?: boolean;
  /**
   * Lock these streams (as lock() does, reading nothing) in the same round trip as the write: for
   * a caller sure enough of their revisions to skip lock(). A stream the commit creates (appended
   * at 'no_stream') may be left unlocked where the store refuses a second creation by itself.
   */
  readonly lockFirst?: readonly string[];
  /**
   * Streams the flush's decisions read without appending to them, each at the revision they were
   * decided on ('no_stream': they took it to have no events): the commit fails (StaleStateError,
   * naming them) if one moved. Invariant 9: every stream a decision read is checked at commit.
   */
  readonly readChecks?: readonly { readonly stream: string; readonly revision: StreamRevision | 'no_stream' }[];
}

export interface Committed {
  readonly handedOff: ReadonlyMap<string, HandedOffJob>;
  /** Where an event written by this commit sits in the global order (when asked for with `positions`). */
  positionOf(stream: string, revision: StreamRevision): GlobalPosition | undefined;
}

/**
 * One transaction, used in this order: read (optional) -> lock -> commit, or rollback at any
 * point. Nothing is visible to others before commit resolves, and a failure anywhere rolls all of
 * it back: the jobs claimed are claimable again at once, nothing is appended.
 */
export interface WriteTransaction {
  read(claims: readonly Claim[]): Promise<readonly (readonly DispatchMessage[])[]>;
  /** Locks the streams (in one order for every transaction, so two flushes never deadlock on them). */
  lock(requests: readonly LockRequest[]): Promise<ReadonlyMap<string, LockedStream>>;
  commit(commit: Commit): Promise<Committed>;
  rollback(): Promise<void>;
  /** Which of these streams a reader recorded as quarantined (jl_quarantined), as this transaction sees it now. */
  quarantined(streams: readonly string[]): Promise<ReadonlySet<string>>;
}

/** An event written by a commit whose outcome is unknown, to look it up by. */
export interface EventProbe {
  readonly stream: string;
  readonly revision: StreamRevision;
  readonly eventId: string;
}

export interface LedgerStore {
  begin(): Promise<WriteTransaction>;
  /** Whether this exact event is recorded: a commit is all or nothing, so one event of it says whether it landed. */
  recorded(probe: EventProbe): Promise<boolean>;
  /** What a worker needs to run these jobs: what a commit's answer carries for those it hands off, read again when that answer was lost. */
  handedOffJobs(jobs: readonly { readonly jobId: string; readonly stream: string }[]): Promise<readonly HandedOffJob[]>;
}

/** The transaction failed for a reason that says nothing about the commands (deadlock, a stream created concurrently, a lost connection): run it again. */
export class TransientWriteError extends Error {
  override readonly name = 'TransientWriteError';
}

export type { JsonObject };

/** An append expected a revision its stream has moved past (or a younger transaction wrote it last): nothing was written. */
export class StaleStateError extends Error {
  override readonly name = 'StaleStateError';
  constructor(
    message: string,
    /** The streams known to have moved (a read check names them); empty when the store cannot say which. */
    readonly streams: readonly string[] = [],
  ) {
    super(message);
  }
}

/** The connection went away while COMMIT was in flight: the transaction may or may not have committed (FAILURE-MODES #19). */
export class CommitOutcomeUnknownError extends Error {
  override readonly name = 'CommitOutcomeUnknownError';
}

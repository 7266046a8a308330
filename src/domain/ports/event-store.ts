// The event store port. The command layer and the projections depend on this interface only;
// src/adapters/eventstore/{postgres,eventstoredb} implement it, and test/contract holds the one
// suite every implementation must pass.

/** Revision of the last event in a stream: the first event of a stream has revision 0. */
export type StreamRevision = number;

/**
 * What an append expects the stream to be at:
 * - a number: the stream's last event has exactly this revision;
 * - 'no_stream': the stream has no event yet;
 * - 'any': no check (used only where the caller does not decide on the stream's state).
 */
export type ExpectedRevision = StreamRevision | 'no_stream' | 'any';

/**
 * Position of an event in the store's global order. Readers order by (commit, prepare):
 * on PostgreSQL commit is the writing transaction's id and prepare its row's identity × 2^20 +
 * its index in the row (`appends.transaction_id`, `appends.position`); on EventStoreDB they are its own
 * commit and prepare positions. Compare positions with `comparePositions`, never by one field.
 */
export interface GlobalPosition {
  readonly commit: bigint;
  readonly prepare: bigint;
}

export const START: GlobalPosition = { commit: 0n, prepare: 0n };

export const comparePositions = (a: GlobalPosition, b: GlobalPosition): number =>
  a.commit === b.commit
    ? a.prepare === b.prepare ? 0 : a.prepare < b.prepare ? -1 : 1
    : a.commit < b.commit ? -1 : 1;

export type JsonObject = { readonly [k: string]: unknown };

export interface EventToAppend {
  readonly type: string;
  /** Must be JSON-serialisable. */
  readonly data: JsonObject;
  readonly metadata?: JsonObject;
  /** Defaults to a random UUID. */
  readonly eventId?: string;
}

export interface RecordedEvent {
  readonly stream: string;
  readonly revision: StreamRevision;
  readonly position: GlobalPosition;
  readonly type: string;
  readonly data: JsonObject;
  readonly metadata: JsonObject;
  readonly eventId: string;
  readonly created: Date;
}

export interface StreamAppend {
  readonly stream: string;
  readonly expected: ExpectedRevision;
  readonly events: readonly EventToAppend[];
}

export interface AppendResult {
  readonly stream: string;
  /** Revision of the last event written: the expected revision for the next append. */
  readonly nextExpectedRevision: StreamRevision;
  /** Position of the last event written. */
  readonly position: GlobalPosition;
}

/** The stream was not at the expected revision. Nothing of the append (or of its batch) was written. */
export class WrongExpectedRevisionError extends Error {
  override readonly name = 'WrongExpectedRevisionError';
  constructor(
    readonly stream: string,
    readonly expected: ExpectedRevision,
    readonly actual: StreamRevision | 'no_stream',
  ) {
    super(`stream ${JSON.stringify(stream)}: expected revision ${String(expected)}, actual ${String(actual)}`);
  }
}

/** An event id given to an append that the store holds already (given ids are unique in the store): nothing of the append (or of its batch) was written. */
export class DuplicateEventIdError extends Error {
  override readonly name = 'DuplicateEventIdError';
  constructor(
    readonly stream: string,
    readonly detail: string,
    /** The id, when the store says which. */
    readonly eventId?: string,
  ) {
    super(`stream ${JSON.stringify(stream)}: an event id is already recorded (${detail})`);
  }
}

export interface ReadStreamOptions {
  /** First revision to return (inclusive). Default 0. */
  readonly fromRevision?: StreamRevision;
  readonly maxCount?: number;
}

export interface ReadAllOptions {
  /** Return events strictly after this position. Default: from the start. */
  readonly after?: GlobalPosition;
  /** Only streams whose name starts with this prefix. */
  readonly streamPrefix?: string;
  readonly maxCount?: number;
  /** Never end inside a transaction: after maxCount events, the rest of the last one's transaction comes too (projections take whole transactions). */
  readonly wholeTransactions?: boolean;
}

export interface SubscribeOptions extends Omit<ReadAllOptions, 'maxCount'> {
  /** Events handed to the handler at most at once. */
  readonly batchSize?: number;
  /** Polling interval when no notification arrives. */
  readonly pollIntervalMs?: number;
}

export interface Subscription {
  /** Stops reading; resolves after the handler call in progress (if any) has returned. */
  stop(): Promise<void>;
  /** Resolves (or rejects with the handler's error) when the subscription ends. */
  readonly done: Promise<void>;
}

export interface EventStore {
  /** Appends atomically: all of `events` or none. */
  append(stream: string, expected: ExpectedRevision, events: readonly EventToAppend[]): Promise<AppendResult>;
  /**
   * Appends to several streams in one transaction, each with its own expected revision: all or
   * nothing. A conflict on any stream throws WrongExpectedRevisionError naming that stream.
   */
  appendMany(appends: readonly StreamAppend[]): Promise<AppendResult[]>;
  /** Events of one stream in revision order; [] for a stream that does not exist. */
  readStream(stream: string, options?: ReadStreamOptions): Promise<RecordedEvent[]>;
  /**
   * Events of several streams, each from its own revision, in one read: a batch of commands over
   * many keys loads them all at once. Every requested stream is in the result ([] when it has none).
   */
  readStreams(requests: readonly { readonly stream: string; readonly fromRevision: StreamRevision }[]): Promise<ReadonlyMap<string, RecordedEvent[]>>;
  /**
   * The events of some jobs (their data's jobId) on these streams, each stream's in revision order:
   * found by an index on job ids rather than by reading the streams whole. Optional: a store
   * without such an index leaves it out, and readers fold the streams instead (job-events.ts).
   * `except`: event types left out (a reader that has no use for a job's 5,000 lease renewals
   * need not read them): a row that holds nothing else is not read.
   */
  readJobEvents?(jobIds: readonly string[], streams: readonly string[], options?: { readonly except?: readonly string[] }): Promise<RecordedEvent[]>;
  /**
   * A job's lease renewals on these streams, counted rather than read: one RenewalRun per stream
   * and lease. Optional, with readJobEvents (a reader without it reads the renewals).
   */
  readJobRenewals?(jobId: string, streams: readonly string[]): Promise<RenewalRun[]>;
  /**
   * The revision of a key stream's last event ('no_stream' before its first), without reading its
   * events or its state: where a key's audit page starts. Optional: a reader without it loads the state.
   */
  keyStreamHead?(stream: string): Promise<StreamRevision | 'no_stream'>;
  /** Events of every stream (or those with a prefix) in global order, only once no earlier event can still appear. */
  readAll(options?: ReadAllOptions): Promise<RecordedEvent[]>;
  /**
   * Catch-up subscription: hands events in global order to `handler`, one batch at a time, never
   * skipping an event that commits late. Wakes on the store's notifications, polls as a fallback.
   * A handler that throws ends the subscription (its `done` rejects).
   */
  subscribe(options: SubscribeOptions, handler: (events: readonly RecordedEvent[]) => Promise<void>): Subscription;
  /** Which of these event ids, given to appends, the store holds already (an idempotent writer's "did this happen?"); an id the store made up is never asked for. */
  recordedEventIds(eventIds: readonly string[]): Promise<ReadonlySet<string>>;
  close(): Promise<void>;
}

/**
 * What a store may lack of the port (PostgreSQL has both; EventStoreDB neither). A store that
 * lacks one refuses its operation with UnsupportedOperationError, writing nothing, and what of
 * the ledger rests on it (multi-key transactions, a duplicate job id answered) needs a store that has it.
 */
export interface EventStoreCapabilities {
  /** appendMany over more than one stream, all or nothing (appendMany over one stream is core). */
  readonly atomicMultiStreamAppend: boolean;
  /** recordedEventIds. */
  readonly eventIdLookup: boolean;
}

/** An operation of the port this store cannot honour (see EventStoreCapabilities); nothing was written. */
export class UnsupportedOperationError extends Error {
  override readonly name = 'UnsupportedOperationError';
  constructor(
    /** The port's operation, e.g. 'appendMany'. */
    readonly operation: string,
    readonly store: string,
    reason: string,
  ) {
    super(`${operation} is not supported on ${store}: ${reason}`);
  }
}

/** A job's renewals of one lease on one stream (EventStore.readJobRenewals). */
export interface RenewalRun {
  readonly stream: string;
  readonly leaseId: string;
  readonly count: number;
  readonly firstRevision: StreamRevision;
  readonly lastRevision: StreamRevision;
}

/** Versioned state snapshots of a stream, so loading does not read a long stream from the start. */
export interface Snapshot {
  readonly stream: string;
  /** Revision of the last event folded into `state`. */
  readonly revision: StreamRevision;
  readonly schemaVersion: number;
  readonly state: JsonObject;
  /**
   * Saved by a flush: keep it also as a past state, unless the stream's newest kept one is less
   * than `spacing` revisions before it.
   */
  readonly keep?: { readonly spacing: number };
}

/** A past state of a stream, kept: where a fold up to a past moment starts. */
export interface KeptSnapshot extends Snapshot {
  /** The latest decision time of any event up to `revision`: a fold up to a moment at or after it passes this state. */
  readonly decidedUntil: number;
  /** Decision time of the event at `revision`. */
  readonly lastAt: number;
}

export interface SnapshotStore {
  /** The newest snapshot of the stream, if any. */
  load(stream: string): Promise<Snapshot | undefined>;
  save(snapshot: Snapshot): Promise<void>;
  /**
   * The newest kept state of the stream in this schema that a fold up to `until` passes: at or
   * before `until.revision`, and decided by `until.at` (decidedUntil <= at). Optional: a store
   * without kept states leaves it out, and such folds start from the stream's first event.
   */
  keptAt?(stream: string, schemaVersion: number, until: { readonly revision?: number; readonly at?: number }): Promise<KeptSnapshot | undefined>;
}

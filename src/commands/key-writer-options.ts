import type { KeyEvent } from '../domain/events.js';
import type { SnapshotStore } from '../domain/ports/event-store.js';
import type { Logger } from '../domain/ports/logger.js';
import type { Outages } from '../domain/ports/outages.js';

export interface KeyWriterOptions {
  /** Epoch ms. Injected so tests and the domain never read the wall clock themselves. */
  readonly clock?: () => number;
  /** [0, 1): the jitter of the back-off between attempts of a flush. */
  readonly random?: () => number;
  readonly logger?: Logger;
  /** Save a snapshot each time a stream passes a multiple of this many events; 0 disables. */
  readonly snapshotEvery?: number;
  /**
   * Also keep the snapshot, as a past state (snapshots_kept), each time a stream passes a multiple
   * of this many events, and at least as many events apart as the state has jobs: a read of the
   * key at a past moment folds from the newest one before it. A multiple of snapshotEvery; 0 keeps none.
   */
  readonly snapshotsKeptEvery?: number;
  /** Transactions a submission may take (conflicts, deferrals, transient failures) before it fails. */
  readonly maxAttempts?: number;
  /** Streams whose states stay cached in this process. */
  readonly cacheSize?: number;
  /** Commands per flush at most (a submission is never split; one larger than this is a flush of its own). */
  readonly maxFlushCommands?: number;
  /** Flushes in flight at once, on disjoint streams (each on a connection of its own). */
  readonly maxConcurrentFlushes?: number;
  /** Maps a decided event to its id in the store; a random one when it returns undefined. */
  readonly eventId?: (stream: string, event: KeyEvent) => string | undefined;
  /** Where load() starts from (writes save snapshots through the flush itself). */
  readonly snapshots?: SnapshotStore;
  /**
   * How long this writer's reads pass over a job they claimed and could not start (its stream
   * quarantined: an event that does not decode; or its Start refused: an async read model behind
   * the ledger): it waits for the stream to be fixed or the read model to catch up, neither lost
   * nor claimed over and over.
   */
  readonly passOverMs?: number;
  /** Told of failures the database's absence explains, and of its answering again (one log line each, there). */
  readonly outages?: Outages;
  /**
   * How long a submission waits for a database that does not answer (a restart, a failover)
   * before it fails with the connection's error. Waiting costs no attempts: an outage is not a
   * conflict. A worker's completion recorded after the outage keeps the job from running twice.
   */
  readonly outageWaitMs?: number;
}

export const KEY_WRITER_DEFAULTS = {
  snapshotEvery: 1_000,
  snapshotsKeptEvery: 10_000,
  maxAttempts: 50,
  cacheSize: 10_000,
  maxFlushCommands: 5_000,
  maxConcurrentFlushes: 2,
  passOverMs: 30_000,
  outageWaitMs: 120_000,
} as const;

/** A submission could not be written after every attempt: its streams are too contended (or kept failing). */
export class ConflictRetriesExhaustedError extends Error {
  override readonly name = 'ConflictRetriesExhaustedError';
  constructor(
    readonly streams: readonly string[],
    readonly attempts: number,
    options?: ErrorOptions,
  ) {
    super(`gave up after ${attempts} attempts to write ${streams.join(', ')}`, options);
  }
}

/** The options a flush reads, with the defaults filled in. */
export type ResolvedKeyWriterOptions = Required<Pick<KeyWriterOptions, keyof typeof KEY_WRITER_DEFAULTS>> & KeyWriterOptions;

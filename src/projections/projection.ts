import type { KeyEvent } from '../domain/events.js';
import type { StreamRevision } from '../domain/ports/event-store.js';
import { JOB_STREAM_PREFIX, KEY_STREAM_PREFIX } from '../domain/streams.js';

// A projection is a name plus a PURE mapping from a batch of decoded events to set-based SQL
// statements on its read model: a handful of statements per batch, whatever its size, not one per
// event. It never runs a query itself: whatever it needs from the database it reads inside its
// statements (INSERT ... SELECT, UPDATE ... FROM), so it can be tested without one, and the
// code of ./apply.ts applies it inline (in the key writer's transaction), from a subscription
// or in a rebuild with the same code.
//
// A batch is events in global order made of WHOLE transactions (so of whole appends): within an
// append a job passes through transient states (pending between a release and where it goes
// next) that a batch therefore never ends in. Applying a sequence of batches gives the same rows
// however the sequence is cut into batches; rebuild.int.test.ts and the verify tests hold it to that.

/** One parameterised SQL statement; `values` are bound to $1, $2, ... */
export interface Statement {
  readonly text: string;
  readonly values: readonly unknown[];
  /** 'handedOff': its rows (jobId, key, name, args) describe jobs started by direct handoff, for the writer to hand to their worker. */
  readonly returns?: 'handedOff' | 'queues';
}

export interface ProjectedEvent {
  readonly event: KeyEvent;
  readonly stream: string;
  readonly revision: StreamRevision;
  /** The concurrency key of a `key:` stream; null for a job's own stream (`job:<jobId>`). */
  readonly key: string | null;
  /**
   * Tells the writing transactions of a batch apart: within one batch, events with the same value
   * were appended together. Read from the store it is events.transaction_id; inline, where the
   * batch is the one transaction being written (and its statements go out with its first
   * statement, before its id is known), it is that id when the flush learnt it, else 0.
   */
  readonly commit: bigint;
}

export interface Projection {
  /** Unique; names its row in projection_checkpoints and its advisory lock. */
  readonly name: string;
  /** Streams whose events it maps; the runner passes it only those. */
  handles(stream: string): boolean;
  /** Statements to run, in order, for a batch of events (see above). Must be pure: same batch, same statements. */
  project(events: readonly ProjectedEvent[]): readonly Statement[];
  /**
   * How to rebuild it from the ledger: the tables a rebuild empties before replaying every event.
   * Absent for a projection that must never be replayed (the dispatcher: its effect is messages).
   */
  readonly rebuild?: { readonly tables: readonly string[] };
}

export const statement = (text: string, ...values: unknown[]): Statement => ({ text, values });

/** The streams the key decider writes: one per concurrency key, one per job without a key. */
export const isLedgerStream = (stream: string): boolean =>
  stream.startsWith(KEY_STREAM_PREFIX) || stream.startsWith(JOB_STREAM_PREFIX);

/** The concurrency key of a stream: `key:<key>` gives <key>; anything else (a job's own stream) gives null. */
export const keyOfStream = (stream: string): string | null =>
  stream.startsWith(KEY_STREAM_PREFIX) ? stream.slice(KEY_STREAM_PREFIX.length) : null;

/** SQL for an epoch-ms value (a float8 expression) as timestamptz, microsecond-exact for any time a job can have; NULL stays NULL. */
export const ms = (expr: string): string => `to_timestamp(${expr} / 1000)`;

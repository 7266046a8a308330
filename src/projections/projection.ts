import type { KeyEvent } from '../domain/events.js';
import type { GlobalPosition, StreamRevision } from '../domain/ports/event-store.js';
import { JOB_STREAM_PREFIX, KEY_STREAM_PREFIX } from '../domain/streams.js';

// A projection is a name plus a PURE mapping from one decoded event (with its stream and revision)
// to SQL statements on its read model. It never runs a query itself: whatever it needs from the
// database it reads inside its statements (INSERT ... SELECT, UPDATE ... FROM), so it can be
// tested without one, and the runner (./runner.ts) can apply it inline, from a subscription or in
// a rebuild with the same code.

/** One parameterised SQL statement; `values` are bound to $1, $2, ... */
export interface Statement {
  readonly text: string;
  readonly values: readonly unknown[];
  /** The number of rows it must touch or return; any other count fails the batch (a broken invariant, never skipped). */
  readonly expectRows?: number;
  /**
   * 'messages': the rows it returns, as columns (queue text, message jsonb), are messages to send.
   * The runner sends them with its SendMessages in the same transaction, after the batch's
   * statements, in the order they were returned.
   */
  readonly emits?: 'messages';
}

export interface ProjectedEvent {
  readonly event: KeyEvent;
  readonly stream: string;
  readonly revision: StreamRevision;
  readonly position: GlobalPosition;
  /** The concurrency key of a `key:` stream; null for a job's own stream (`job:<jobId>`). */
  readonly key: string | null;
}

export interface Projection {
  /** Unique; names its rows in projection_streams and projection_checkpoints. */
  readonly name: string;
  /** Streams whose events it maps; events of other streams are passed over (their revisions are not tracked). */
  handles(stream: string): boolean;
  /** Statements to run, in order, for one event. Must be pure: same event, same statements. */
  project(event: ProjectedEvent): readonly Statement[];
  /**
   * Optional: the mapping to use for one batch, given the batch's events of its streams first
   * (skipped ones included). For a projection that leaves out what a later event of the same batch
   * makes moot; must stay pure, and applying the events one batch at a time must stay correct.
   */
  forBatch?(events: readonly ProjectedEvent[]): (event: ProjectedEvent) => readonly Statement[];
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

/** SQL for an epoch-ms parameter as timestamptz (microsecond-exact for any time a job can have). */
export const ms = (param: number): string => `to_timestamp($${param}::float8 / 1000)`;

import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import {
  DuplicateEventIdError,
  START,
  WrongExpectedRevisionError,
  type AppendResult,
  type EventStore,
  type EventToAppend,
  type ExpectedRevision,
  type JsonObject,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type StreamAppend,
  type StreamRevision,
  type SubscribeOptions,
  type Subscription,
} from '../../../domain/ports/event-store.js';
import { NotificationListener } from '../../postgres/listener.js';
import { PollingSubscription } from './polling-subscription.js';

/** Channel notified by every append, at its commit. The payload is the stream name ('' if long). */
export const EVENTS_CHANNEL = 'jobledger_events';

/**
 * Runs inside an append transaction, after its events are written and before commit, with all
 * the events of the transaction in global order. Throwing rolls the whole append back. An append
 * that hits a deadlock is retried in a new transaction, so a handler may run more than once for
 * one append: it must act only through `client`.
 */
export type InlineHandler = (client: pg.PoolClient, events: readonly RecordedEvent[]) => Promise<void>;

export interface PostgresEventStoreOptions {
  readonly inlineHandlers?: readonly InlineHandler[];
}

/**
 * The event store on PostgreSQL (schema: src/adapters/postgres/migrations). It borrows
 * connections from a pool it does not own: `close()` stops its subscriptions, and ending the pool
 * stays the caller's job. Each subscription opens one extra connection (LISTEN) with the pool's
 * settings.
 */
export class PostgresEventStore implements EventStore {
  private readonly inlineHandlers: readonly InlineHandler[];
  private readonly subscriptions = new Set<PollingSubscription>();

  constructor(
    private readonly pool: pg.Pool,
    options: PostgresEventStoreOptions = {},
  ) {
    this.inlineHandlers = options.inlineHandlers ?? [];
  }

  async append(stream: string, expected: ExpectedRevision, events: readonly EventToAppend[]): Promise<AppendResult> {
    const [result] = await this.appendMany([{ stream, expected, events }]);
    return result!;
  }

  async appendMany(appends: readonly StreamAppend[]): Promise<AppendResult[]> {
    const empty = appends.find((append) => append.events.length === 0);
    if (empty) throw new RangeError(`append to ${JSON.stringify(empty.stream)} has no events`);
    if (appends.length === 0) return [];
    // Lock order: every transaction takes its stream rows sorted by name, so two batches sharing
    // streams queue up instead of deadlocking. The sort is stable: a stream named twice is
    // written in the caller's order, the second expecting what the first wrote.
    const batch = appends
      .map((append, index) => ({ index, ...prepareAppend(append) }))
      .sort((a, b) => (a.stream < b.stream ? -1 : a.stream > b.stream ? 1 : 0));
    const written = await this.writeWithRetries(batch);
    const results: AppendResult[] = [];
    batch.forEach((append, i) => {
      const last = written[i]!.at(-1)!;
      results[append.index] = {
        stream: append.stream,
        nextExpectedRevision: Number(last.stream_revision),
        position: { commit: BigInt(last.transaction_id_text), prepare: BigInt(last.global_position) },
      };
    });
    return results;
  }

  async readStream(stream: string, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    const { rows } = await this.pool.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM events
       WHERE stream = $1 AND stream_revision >= $2
       ORDER BY stream_revision
       LIMIT $3`,
      [stream, options.fromRevision ?? 0, options.maxCount ?? null],
    );
    return rows.map(toRecordedEvent);
  }

  async readStreams(requests: readonly { readonly stream: string; readonly fromRevision: StreamRevision }[]): Promise<ReadonlyMap<string, RecordedEvent[]>> {
    const result = new Map<string, RecordedEvent[]>(requests.map((r) => [r.stream, []]));
    if (requests.length === 0) return result;
    const { rows } = await this.pool.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM events
       JOIN unnest($1::text[], $2::bigint[]) AS wanted (s, from_revision)
         ON events.stream = wanted.s AND events.stream_revision >= wanted.from_revision
       ORDER BY stream, stream_revision`,
      [requests.map((r) => r.stream), requests.map((r) => r.fromRevision)],
    );
    for (const row of rows) result.get(row.stream)?.push(toRecordedEvent(row));
    return result;
  }

  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    const after = options.after ?? START;
    const values: unknown[] = [after.commit.toString(), after.prepare.toString(), options.maxCount ?? null];
    if (options.streamPrefix !== undefined) values.push(options.streamPrefix);
    // Below the snapshot's xmin every transaction has ended, so no event can still appear before
    // what this returns; above it, one still open (with a smaller id than events already
    // committed) would be skipped by a reader that moved past them.
    const { rows } = await this.pool.query<EventRow>(
      `SELECT ${EVENT_COLUMNS} FROM events
       WHERE (transaction_id, global_position) > ($1::xid8, $2::bigint)
         AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
         ${options.streamPrefix === undefined ? '' : 'AND starts_with(stream, $4)'}
       ORDER BY transaction_id, global_position
       LIMIT $3`,
      values,
    );
    return rows.map(toRecordedEvent);
  }

  async recordedEventIds(eventIds: readonly string[]): Promise<ReadonlySet<string>> {
    // event_id is a uuid: a string that is not one was never recorded, and must not reach the cast.
    const candidates = eventIds.filter((id) => UUID.test(id));
    if (candidates.length === 0) return new Set();
    const { rows } = await this.pool.query<{ event_id: string }>(
      'SELECT event_id FROM events WHERE event_id = ANY($1::uuid[])',
      [candidates],
    );
    const found = new Set(rows.map((row) => row.event_id));
    return new Set(candidates.filter((id) => found.has(id.toLowerCase())));
  }

  subscribe(options: SubscribeOptions, handler: (events: readonly RecordedEvent[]) => Promise<void>): Subscription {
    const prefix = options.streamPrefix;
    const subscription = new PollingSubscription({
      read: (after, maxCount) => this.readAll({ after, maxCount, ...(prefix === undefined ? {} : { streamPrefix: prefix }) }),
      handler,
      after: options.after ?? START,
      batchSize: options.batchSize ?? 500,
      pollIntervalMs: options.pollIntervalMs ?? 500,
      listen: (wake) =>
        new NotificationListener(this.pool.options, EVENTS_CHANNEL, (stream) => {
          // A notification for a stream outside the prefix cannot make anything new readable.
          if (prefix === undefined || !stream || stream.startsWith(prefix)) wake();
        }),
      onEnd: () => this.subscriptions.delete(subscription),
    });
    this.subscriptions.add(subscription);
    return subscription;
  }

  async close(): Promise<void> {
    await Promise.all([...this.subscriptions].map((subscription) => subscription.stop()));
  }

  /**
   * A transaction that failed for a reason that says nothing about the expected revisions
   * (deadlock, serialization failure, out-of-order write) wrote nothing, so it is run again: the
   * new attempt re-checks every expected revision, and a real conflict surfaces as usual. Each
   * such failure means a concurrent transaction went through, so repeats are rare; past the
   * limit the batch fails as a conflict on its first stream, which callers already re-decide on.
   */
  private async writeWithRetries(batch: readonly PreparedAppend[]): Promise<WrittenRow[][]> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.write(batch);
      } catch (error) {
        if (!isTransient(error)) throw error;
        if (attempt === MAX_ATTEMPTS) {
          const first = batch[0]!;
          throw new WrongExpectedRevisionError(first.stream, first.expected, await this.actualRevision(this.pool, first.stream));
        }
      }
    }
  }

  private async write(batch: readonly PreparedAppend[]): Promise<WrittenRow[][]> {
    const client = await this.pool.connect();
    let broken = false;
    try {
      // One statement is its own transaction: the hot path (one stream, nothing inline) costs one
      // round trip. Atomicity then rests on writeStream being a single statement.
      if (batch.length === 1 && this.inlineHandlers.length === 0) return [await this.writeStream(client, batch[0]!)];
      // READ COMMITTED explicitly: the conflict checks rely on its re-check of a row updated
      // concurrently (the UPDATE waits, then sees the new revision and matches nothing).
      await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
      try {
        const written: WrittenRow[][] = [];
        for (const append of batch) written.push(await this.writeStream(client, append));
        if (this.inlineHandlers.length > 0) {
          const recorded = batch
            .flatMap((append, i) => recordedEvents(append, written[i]!))
            .sort((a, b) => (a.position.prepare < b.position.prepare ? -1 : 1));
          for (const handler of this.inlineHandlers) await handler(client, recorded);
        }
        await client.query('COMMIT');
        return written;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {
          broken = true;
        });
        throw error;
      }
    } finally {
      client.release(broken);
    }
  }

  /**
   * Checks the expected revision, bumps the stream row and inserts the events in ONE statement
   * (see APPEND_SQL), so there is no window between check and write, and no extra round trip.
   */
  private async writeStream(client: pg.PoolClient, append: PreparedAppend): Promise<WrittenRow[]> {
    const kind = append.expected === 'any' ? 'any' : append.expected === 'no_stream' ? 'no_stream' : 'exact';
    const values: unknown[] = [append.stream, append.payload, append.events.length, append.notification];
    if (kind === 'exact') values.push(append.expected);
    const { rows } = await client
      .query<WrittenRow>({ name: `jobledger_append_${kind}`, text: APPEND_SQL[kind], values })
      .catch((error: unknown) => {
        if (isPgError(error) && error.code === '23505' && error.constraint === 'events_event_id_key') {
          throw new DuplicateEventIdError(append.stream, error.detail ?? '');
        }
        throw error;
      });
    if (rows.length > 0) return rows.sort((a, b) => Number(a.stream_revision) - Number(b.stream_revision));
    // Nothing written. Read the revision in a statement of its own: the append's snapshot may
    // predate the writer that moved the stream on.
    const actual = await this.actualRevision(client, append.stream);
    if (matches(append.expected, actual)) throw new OutOfOrderWrite();
    throw new WrongExpectedRevisionError(append.stream, append.expected, actual);
  }

  private async actualRevision(db: pg.Pool | pg.PoolClient, stream: string): Promise<StreamRevision | 'no_stream'> {
    const { rows } = await db.query<{ revision: string }>('SELECT revision FROM streams WHERE stream = $1', [stream]);
    return rows[0] === undefined ? 'no_stream' : Number(rows[0].revision);
  }
}

const MAX_ATTEMPTS = 10;

const isPgError = (error: unknown): error is pg.DatabaseError => error instanceof Error && 'code' in error && 'constraint' in error;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The transaction already holds an id older than the stream's last writer's (see streams.transaction_id). */
class OutOfOrderWrite extends Error {}

const isTransient = (error: unknown): boolean =>
  error instanceof OutOfOrderWrite ||
  // deadlock_detected, serialization_failure
  (error instanceof Error && 'code' in error && (error.code === '40P01' || error.code === '40001'));

const matches = (expected: ExpectedRevision, actual: StreamRevision | 'no_stream'): boolean =>
  expected === 'any' || expected === actual;

// Statement shape: CTE `s` checks the expectation and moves the stream row on, returning the
// revision before the append as `base` (-1 for a new stream), or no row on a conflict; `e` inserts
// the events at base+1.. only if `s` returned a row. $1 stream, $2 events as a JSON array,
// $3 number of events, $4 notification payload, $5 expected revision.
//
// On an existing stream, `s` also refuses (returns no row) when the stream's last writer has a
// newer transaction id than ours: our id may come from an earlier stream of the batch, taken
// before that writer started, and our events would then sort before its in the global order
// although they follow them in the stream. The caller retries in a new transaction
// (OutOfOrderWrite). The check runs again on the row's newest version after any wait for its
// lock, like the revision check.
const insertEvents = `
  e AS (
    INSERT INTO events (stream, stream_revision, type, data, metadata, event_id)
    SELECT $1, s.base + t.ord, t.type, t.data, t.metadata, t.event_id
    FROM s, ROWS FROM (jsonb_to_recordset($2::jsonb) AS (type text, data jsonb, metadata jsonb, event_id uuid))
            WITH ORDINALITY AS t (type, data, metadata, event_id, ord)
    ORDER BY t.ord
    RETURNING stream_revision, global_position, transaction_id, created
  )
SELECT stream_revision, global_position, transaction_id::text AS transaction_id_text, created FROM e`;

// pg_notify sits in the RETURNING of the stream row, so it fires once per stream written and
// only when the append goes through; it is delivered at commit.
const APPEND_SQL = {
  // A concurrent writer holding the row makes us wait; under READ COMMITTED the WHERE is then
  // re-evaluated on its committed version, whose revision no longer matches: no row, conflict.
  exact: `
WITH s AS (
  UPDATE streams SET revision = revision + $3::bigint, transaction_id = pg_current_xact_id()
  WHERE stream = $1 AND revision = $5::bigint AND transaction_id <= pg_current_xact_id()
  RETURNING revision - $3::bigint AS base, pg_notify('${EVENTS_CHANNEL}', $4::text)
),${insertEvents}`,
  // A concurrent creator makes ON CONFLICT wait for its outcome: committed, we insert nothing.
  no_stream: `
WITH s AS (
  INSERT INTO streams (stream, revision) VALUES ($1, $3::bigint - 1)
  ON CONFLICT (stream) DO NOTHING
  RETURNING -1::bigint AS base, pg_notify('${EVENTS_CHANNEL}', $4::text)
),${insertEvents}`,
  // The upsert locks the row, so concurrent 'any' appends to one stream take turns.
  any: `
WITH s AS (
  INSERT INTO streams AS st (stream, revision) VALUES ($1, $3::bigint - 1)
  ON CONFLICT (stream) DO UPDATE SET revision = st.revision + $3::bigint, transaction_id = excluded.transaction_id
  WHERE st.transaction_id <= excluded.transaction_id
  RETURNING st.revision - $3::bigint AS base, pg_notify('${EVENTS_CHANNEL}', $4::text)
),${insertEvents}`,
} as const;

/** pg_notify refuses payloads of 8000 bytes or more; a long stream name is sent as '' ("some stream"). */
const MAX_NOTIFICATION_BYTES = 1000;

interface PreparedAppend {
  readonly stream: string;
  readonly expected: ExpectedRevision;
  readonly events: readonly EventToAppend[];
  /** The events as one JSON array, the shape jsonb_to_recordset reads. */
  readonly payload: string;
  readonly notification: string;
}

interface WireEvent {
  readonly type: string;
  readonly data: JsonObject;
  readonly metadata: JsonObject;
  readonly event_id: string;
}

const prepareAppend = (append: StreamAppend): PreparedAppend => {
  const wire: WireEvent[] = append.events.map((event) => ({
    type: event.type,
    data: event.data,
    metadata: event.metadata ?? {},
    event_id: event.eventId ?? randomUUID(),
  }));
  return {
    stream: append.stream,
    expected: append.expected,
    events: append.events,
    payload: JSON.stringify(wire),
    notification: Buffer.byteLength(append.stream) <= MAX_NOTIFICATION_BYTES ? append.stream : '',
  };
};

interface WrittenRow {
  readonly stream_revision: string;
  readonly global_position: string;
  readonly transaction_id_text: string;
  readonly created: Date;
}

/** The events as stored: data and metadata parsed back from what was sent, as a reader would get them. */
const recordedEvents = (append: PreparedAppend, rows: readonly WrittenRow[]): RecordedEvent[] => {
  const wire = JSON.parse(append.payload) as WireEvent[];
  return rows.map((row, i) => ({
    stream: append.stream,
    revision: Number(row.stream_revision),
    position: { commit: BigInt(row.transaction_id_text), prepare: BigInt(row.global_position) },
    type: wire[i]!.type,
    data: wire[i]!.data,
    metadata: wire[i]!.metadata,
    eventId: wire[i]!.event_id,
    created: row.created,
  }));
};

// xid8 has no JavaScript type parser: it comes as text. The alias must not be `transaction_id`:
// ORDER BY transaction_id would then sort by the text, and '100000' < '99999'.
/** The columns a RecordedEvent is read from (xid8 as text: bigints arrive as strings). */
export const EVENT_COLUMNS =
  'global_position, transaction_id::text AS transaction_id_text, stream, stream_revision, type, data, metadata, event_id, created';

export interface EventRow {
  // int8 arrives as a string unless the application changed pg's type parsers; Number() and
  // BigInt() take either.
  readonly global_position: string;
  readonly transaction_id_text: string;
  readonly stream: string;
  readonly stream_revision: string;
  readonly type: string;
  readonly data: JsonObject;
  readonly metadata: JsonObject;
  readonly event_id: string;
  readonly created: Date;
}

export const toRecordedEvent = (row: EventRow): RecordedEvent => ({
  stream: row.stream,
  revision: Number(row.stream_revision),
  position: { commit: BigInt(row.transaction_id_text), prepare: BigInt(row.global_position) },
  type: row.type,
  data: row.data,
  metadata: row.metadata,
  eventId: row.event_id,
  created: row.created,
});

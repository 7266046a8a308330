import type pg from 'pg';
import {
  START,
  WrongExpectedRevisionError,
  type AppendResult,
  type EventStore,
  type EventToAppend,
  type ExpectedRevision,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type RenewalRun,
  type StreamAppend,
  type StreamRevision,
  type SubscribeOptions,
  type Subscription,
} from '../../../domain/ports/event-store.js';
import { KEY_STATE_SCHEMA_VERSION } from '../../../domain/key-state.js';
import { TransientWriteError, type EventProbe, type HandedOffJob, type LedgerStore } from '../../../domain/ports/ledger-store.js';
import { HANDED_OFF_SQL } from '../../../projections/dispatcher.js';
import type { Projection } from '../../../projections/projection.js';
import { Notifications } from '../../postgres/listener.js';
import { PollingSubscription } from './polling-subscription.js';
import { eventOfRow, eventsAfter, type EventRow, type LedgerRow } from '../../../projections/ledger-rows.js';
import { isJobStream } from './stream-sql.js';
import { EVENTS_CHANNEL, READ_JOB_EVENTS_SQL, READ_JOB_RENEWALS_SQL, READ_JOB_STREAM_ROWS_SQL, READ_STREAMS_SQL, READ_STREAM_SQL, afterParameters, eventsFrom, readAllSql } from './event-rows.js';
import { ShardMap } from './shard-map.js';
import { PgWriteTransaction } from './write-transaction.js';

export { EVENTS_CHANNEL } from './event-rows.js';

export interface PostgresEventStoreOptions {
  /** Projections applied inside every transaction that appends, to the streams they handle (inline mode). */
  readonly inline?: readonly Projection[];
  /**
   * NOTIFY EVENTS_CHANNEL at the commit of the key writer's flushes (default false): only async
   * runners subscribe, and on PostgreSQL 15 a NOTIFY wakes every listening connection of the
   * database, whatever its channel. append() and appendMany() always notify.
   */
  readonly notifyFlushes?: boolean;
  /** The process's shared LISTEN connection for subscriptions (one of its own otherwise). */
  readonly notifications?: Notifications;
  /** The ledger is distributed by key (Citus): write transactions route each shard's streams apart (write-transaction.ts). */
  readonly distributed?: boolean;
}

/**
 * The event store on PostgreSQL (schema: src/adapters/postgres/migrations), and the key writer's
 * LedgerStore (./write-transaction.ts). It borrows connections from a pool it does not own:
 * `close()` stops its subscriptions, and ending the pool stays the caller's job. Each subscription
 * opens one extra connection (LISTEN) with the pool's settings.
 */
export class PostgresEventStore implements EventStore, LedgerStore {
  private readonly inline: readonly Projection[];
  private readonly notifications: Notifications;
  /** Where each stream lives, on a distributed ledger. */
  private readonly shards: ShardMap | undefined;
  private readonly subscriptions = new Set<PollingSubscription>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly options: PostgresEventStoreOptions = {},
  ) {
    this.inline = options.inline ?? [];
    this.shards = options.distributed === true ? new ShardMap() : undefined;
    this.notifications = options.notifications ?? new Notifications(pool.options);
  }

  async begin(): Promise<PgWriteTransaction> {
    return this.transaction(this.options.notifyFlushes === true);
  }

  private async transaction(notifyEvents: boolean): Promise<PgWriteTransaction> {
    const client = await this.pool.connect();
    return new PgWriteTransaction(client, { inline: this.inline, notifyEvents, schemaVersion: KEY_STATE_SCHEMA_VERSION, ...(this.shards === undefined ? {} : { shards: this.shards }) });
  }

  async recorded(probe: EventProbe): Promise<boolean> {
    // By primary key (the row holding the revision): the event id alone would need an index on every event's id.
    const { rows } = await this.pool.query<{ found: boolean }>(
      `SELECT revision + cardinality(ids) > $2 AND ids[($2 - revision + 1)::int] = $3::uuid AS found FROM ledger_appends
       WHERE stream = $1 AND revision <= $2 ORDER BY revision DESC LIMIT 1`,
      [probe.stream, probe.revision, probe.eventId],
    );
    return rows[0]?.found === true;
  }

  async handedOffJobs(jobs: readonly { readonly jobId: string; readonly stream: string }[]): Promise<readonly HandedOffJob[]> {
    return (await this.pool.query<HandedOffJob>(HANDED_OFF_SQL, [jobs.map((j) => j.jobId), [...new Set(jobs.map((j) => j.stream))]])).rows;
  }

  async append(stream: string, expected: ExpectedRevision, events: readonly EventToAppend[]): Promise<AppendResult> {
    const [result] = await this.appendMany([{ stream, expected, events }]);
    return result!;
  }

  /**
   * One transaction through the key writer's path: lock the streams, check each expected
   * revision, write. A stream named twice is written in the caller's order, the second append
   * expecting what the first wrote. A stream whose last writer is younger than this transaction
   * (see streams.transaction_id) is written in a new one.
   */
  async appendMany(appends: readonly StreamAppend[]): Promise<AppendResult[]> {
    const empty = appends.find((append) => append.events.length === 0);
    if (empty) throw new RangeError(`append to ${JSON.stringify(empty.stream)} has no events`);
    if (appends.length === 0) return [];
    for (let attempt = 1; ; attempt++) {
      const tx = await this.transaction(true);
      try {
        const locked = await tx.lock(appends.map((a) => ({ stream: a.stream })));
        if ([...locked.values()].some((l) => l.deferred) && attempt < MAX_ATTEMPTS) {
          await tx.rollback();
          continue;
        }
        const merged = new Map<string, { stream: string; expected: number | 'no_stream'; events: EventToAppend[] }>();
        const at = new Map<string, StreamRevision | 'no_stream'>([...locked].map(([stream, l]) => [stream, l.revision]));
        for (const append of appends) {
          const actual = at.get(append.stream)!;
          if (append.expected !== 'any' && append.expected !== actual) throw new WrongExpectedRevisionError(append.stream, append.expected, actual);
          const entry = merged.get(append.stream) ?? { stream: append.stream, expected: actual, events: [] };
          for (const e of append.events) entry.events.push(e);
          merged.set(append.stream, entry);
          at.set(append.stream, (actual === 'no_stream' ? -1 : actual) + append.events.length);
        }
        // Through the port every given id counts as unique: appended twice, it is refused (DuplicateEventIdError).
        const decided = [...merged.values()].map((a) => ({ ...a, events: a.events.map((e) => (e.eventId === undefined ? e : { ...e, unique: true })) }));
        const committed = await tx.commit({ appends: decided, positions: true });
        const seen = new Map<string, number>();
        return appends.map((append) => {
          const before = seen.get(append.stream) ?? 0;
          seen.set(append.stream, before + append.events.length);
          const entry = merged.get(append.stream)!;
          const last = (entry.expected === 'no_stream' ? -1 : entry.expected) + before + append.events.length;
          return { stream: append.stream, nextExpectedRevision: last, position: committed.positionOf(append.stream, last)! };
        });
      } catch (error) {
        await tx.rollback();
        if (error instanceof TransientWriteError && attempt < MAX_ATTEMPTS) continue;
        throw error;
      }
    }
  }

  async readStream(stream: string, options: ReadStreamOptions = {}): Promise<RecordedEvent[]> {
    const from = options.fromRevision ?? 0;
    const { rows } = await this.pool.query<LedgerRow>(READ_STREAM_SQL, [stream, from, options.maxCount ?? null]);
    return eventsFrom(rows, from, options.maxCount);
  }

  async readStreams(requests: readonly { readonly stream: string; readonly fromRevision: StreamRevision }[]): Promise<ReadonlyMap<string, RecordedEvent[]>> {
    const result = new Map<string, RecordedEvent[]>(requests.map((r) => [r.stream, []]));
    if (requests.length === 0) return result;
    const from = new Map(requests.map((r) => [r.stream, r.fromRevision]));
    const { rows } = await this.pool.query<LedgerRow>(READ_STREAMS_SQL, [requests.map((r) => r.stream), requests.map((r) => r.fromRevision)]);
    for (const row of rows) result.get(row.stream)?.push(...eventsFrom([row], from.get(row.stream)!));
    return result;
  }

  async readJobEvents(jobIds: readonly string[], streams: readonly string[], options: { readonly except?: readonly string[] } = {}): Promise<RecordedEvent[]> {
    const except = options.except ?? [];
    const keyed = streams.filter((s) => !isJobStream(s));
    const jobStreams = streams.filter(isJobStream);
    // A job stream is its job's alone: read by its primary key, whole but for the types left out.
    const own = jobStreams.length === 0 ? [] : (await this.pool.query<LedgerRow>(READ_JOB_STREAM_ROWS_SQL, [jobStreams, except])).rows;
    const named = keyed.length === 0 || jobIds.length === 0 ? [] : (await this.pool.query<EventRow>(READ_JOB_EVENTS_SQL, [jobIds, keyed, except])).rows;
    const left = new Set(except);
    return [...eventsFrom(own, 0).filter((e) => !left.has(e.type)), ...named.map(eventOfRow)];
  }

  async readJobRenewals(jobId: string, streams: readonly string[]): Promise<RenewalRun[]> {
    const { rows } = await this.pool.query<{ stream: string; lease_id: string; count: number; first_revision: string; last_revision: string }>(READ_JOB_RENEWALS_SQL, [
      jobId,
      streams.filter(isJobStream),
      streams.filter((s) => !isJobStream(s)),
    ]);
    return rows.map((r) => ({ stream: r.stream, leaseId: r.lease_id, count: r.count, firstRevision: Number(r.first_revision), lastRevision: Number(r.last_revision) }));
  }

  async keyStreamHead(stream: string): Promise<StreamRevision | 'no_stream'> {
    if (isJobStream(stream)) throw new TypeError(`keyStreamHead: ${stream} is a job's stream, which has no streams row`);
    // The streams row is written with each append (its revision is the optimistic check's): one index lookup.
    const { rows } = await this.pool.query<{ revision: string }>(`SELECT revision FROM streams WHERE stream = $1`, [stream]);
    return rows[0] === undefined ? 'no_stream' : Number(rows[0].revision);
  }

  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    const after = options.after ?? START;
    const values: unknown[] = [...afterParameters(after), options.maxCount ?? null];
    if (options.streamPrefix !== undefined) values.push(options.streamPrefix);
    const whole = options.wholeTransactions === true && options.maxCount !== undefined;
    const { rows } = await this.pool.query<LedgerRow>(readAllSql(options.streamPrefix !== undefined, whole), values);
    const events = eventsAfter(rows, after);
    return whole || options.maxCount === undefined ? events : events.slice(0, options.maxCount);
  }

  async recordedEventIds(eventIds: readonly string[]): Promise<ReadonlySet<string>> {
    // event_id is a uuid: a string that is not one was never recorded, and must not reach the cast.
    const candidates = eventIds.filter((id) => UUID.test(id));
    if (candidates.length === 0) return new Set();
    // Only the ids that had to be unique are kept: those given through append(), and the writer's enqueues of given job ids.
    const { rows } = await this.pool.query<{ event_id: string }>('SELECT event_id FROM unique_event_ids WHERE event_id = ANY($1::uuid[])', [candidates]);
    const found = new Set(rows.map((row) => row.event_id));
    return new Set(candidates.filter((id) => found.has(id.toLowerCase())));
  }

  subscribe(options: SubscribeOptions, handler: (events: readonly RecordedEvent[]) => Promise<void>): Subscription {
    const prefix = options.streamPrefix;
    const subscription = new PollingSubscription({
      read: (after, maxCount) =>
        this.readAll({ after, maxCount, wholeTransactions: options.wholeTransactions === true, ...(prefix === undefined ? {} : { streamPrefix: prefix }) }),
      handler,
      after: options.after ?? START,
      batchSize: options.batchSize ?? 500,
      pollIntervalMs: options.pollIntervalMs ?? 500,
      listen: (wake) => {
        let listening: { stop(): Promise<void> } | undefined;
        return {
          start: () => void (listening = this.notifications.listen(EVENTS_CHANNEL, wake)),
          close: async () => listening?.stop(),
        };
      },
      onEnd: () => this.subscriptions.delete(subscription),
    });
    this.subscriptions.add(subscription);
    return subscription;
  }

  async close(): Promise<void> {
    await Promise.all([...this.subscriptions].map((subscription) => subscription.stop()));
  }

}

const MAX_ATTEMPTS = 10;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;


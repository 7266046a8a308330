import type { EventStoreDBClient } from '@eventstore/db-client';
import {
  START,
  UnsupportedOperationError,
  type AppendResult,
  type EventStore,
  type EventToAppend,
  type ExpectedRevision,
  type ReadAllOptions,
  type ReadStreamOptions,
  type RecordedEvent,
  type StreamAppend,
  type StreamRevision,
  type SubscribeOptions,
  type Subscription,
} from '../../../domain/ports/event-store.js';
import { appendToStream } from './append.js';
import { readAllEvents } from './read-all.js';
import { readStreamEvents } from './read-stream.js';
import { CatchUpSubscription } from './subscription.js';
import { EVENTSTOREDB_CAPABILITIES } from './unsupported.js';

/**
 * The event store on EventStoreDB / KurrentDB, through @eventstore/db-client: the port's streams
 * are ESDB streams of the same names, its expected revisions ESDB's (no_stream, any, a revision),
 * its global positions ESDB's $all {commit, prepare} positions. It uses a client it does not own:
 * `close()` stops its subscriptions, and `client.dispose()` stays the caller's job.
 *
 * What ESDB does not give (EVENTSTOREDB_CAPABILITIES, ./unsupported.ts) is refused with an
 * UnsupportedOperationError, before anything is written: appendMany over several streams, and
 * recordedEventIds. The ledger runs on PostgreSQL for those (and for inline projections, which
 * share the append's transaction); this store is not a LedgerStore.
 */
export class EventStoreDbEventStore implements EventStore {
  static readonly capabilities = EVENTSTOREDB_CAPABILITIES;
  private readonly subscriptions = new Set<CatchUpSubscription>();

  constructor(private readonly client: EventStoreDBClient) {}

  async append(stream: string, expected: ExpectedRevision, events: readonly EventToAppend[]): Promise<AppendResult> {
    const [result] = await this.appendMany([{ stream, expected, events }]);
    return result!;
  }

  /** Appends to one stream (named once or more) atomically; refuses appends that span several streams. */
  async appendMany(appends: readonly StreamAppend[]): Promise<AppendResult[]> {
    const empty = appends.find((append) => append.events.length === 0);
    if (empty) throw new RangeError(`append to ${JSON.stringify(empty.stream)} has no events`);
    if (appends.length === 0) return [];
    const streams = new Set(appends.map((append) => append.stream));
    if (streams.size > 1) {
      throw new UnsupportedOperationError(
        'appendMany',
        'EventStoreDB',
        `an append is atomic within one stream only, and these span ${streams.size} (${[...streams].map((s) => JSON.stringify(s)).join(', ')}); nothing was written`,
      );
    }
    return appendToStream(this.client, appends[0]!.stream, appends);
  }

  readStream(stream: string, options?: ReadStreamOptions): Promise<RecordedEvent[]> {
    return readStreamEvents(this.client, stream, options);
  }

  /** One read per stream, all at once: ESDB reads one stream per call. */
  async readStreams(requests: readonly { readonly stream: string; readonly fromRevision: StreamRevision }[]): Promise<ReadonlyMap<string, RecordedEvent[]>> {
    const read = await Promise.all(requests.map(async (r) => [r.stream, await readStreamEvents(this.client, r.stream, { fromRevision: r.fromRevision })] as const));
    return new Map(read);
  }

  readAll(options?: ReadAllOptions): Promise<RecordedEvent[]> {
    return readAllEvents(this.client, options);
  }

  subscribe(options: SubscribeOptions, handler: (events: readonly RecordedEvent[]) => Promise<void>): Subscription {
    const subscription = new CatchUpSubscription({
      client: this.client,
      after: options.after ?? START,
      streamPrefix: options.streamPrefix,
      batchSize: options.batchSize ?? 500,
      wholeTransactions: options.wholeTransactions === true,
      idleMs: options.pollIntervalMs ?? 500,
      handler,
      onEnd: () => this.subscriptions.delete(subscription),
    });
    this.subscriptions.add(subscription);
    return subscription;
  }

  async recordedEventIds(_eventIds: readonly string[]): Promise<ReadonlySet<string>> {
    throw new UnsupportedOperationError('recordedEventIds', 'EventStoreDB', 'EventStoreDB has no index by event id (it deduplicates a retried append by its ids, not a lookup)');
  }

  async close(): Promise<void> {
    await Promise.all([...this.subscriptions].map((subscription) => subscription.stop()));
  }
}

import { excludeSystemEvents, streamNameFilter, type AllStreamResolvedEvent, type AllStreamSubscription, type EventStoreDBClient } from '@eventstore/db-client';
import type { GlobalPosition, RecordedEvent, Subscription } from '../../../domain/ports/event-store.js';
import { Wakeup } from '../../wakeup.js';
import { toRecordedEvent } from './codec.js';
import { batchDecided, batchLength, isAfter, toReadPosition } from './positions.js';

export interface CatchUpOptions {
  readonly client: EventStoreDBClient;
  /** Events strictly after this position. */
  readonly after: GlobalPosition;
  readonly streamPrefix?: string | undefined;
  readonly batchSize: number;
  readonly wholeTransactions: boolean;
  /** How long the loop sleeps when nothing arrives before looking again (events wake it at once). */
  readonly idleMs: number;
  readonly handler: (events: readonly RecordedEvent[]) => Promise<void>;
  readonly onEnd: () => void;
}

/**
 * A catch-up subscription to $all, filtered on the server (the stream prefix, or no system
 * event), that hands events to the handler in batches of what has arrived. The client's stream
 * is read in paused mode, so while the handler runs nothing more is taken from it and gRPC's flow
 * control holds the server back. The server ending the subscription, or the connection failing,
 * ends it like a failing handler: `done` rejects, and its owner decides what to restart.
 */
export class CatchUpSubscription implements Subscription {
  readonly done: Promise<void>;
  private stopping = false;
  private ended = false;
  private failure: { readonly error: unknown } | undefined;
  private readonly wakeup = new Wakeup();
  private readonly source: AllStreamSubscription;

  constructor(options: CatchUpOptions) {
    const prefix = options.streamPrefix;
    this.source = options.client.subscribeToAll({
      fromPosition: toReadPosition(options.after),
      filter: prefix === undefined ? excludeSystemEvents() : streamNameFilter({ prefixes: [prefix] }),
    });
    this.source.on('readable', () => this.wakeup.wake());
    this.source.on('end', () => {
      this.ended = true;
      this.wakeup.wake();
    });
    this.source.on('error', (error: Error) => {
      this.failure ??= { error };
      this.wakeup.wake();
    });
    this.done = this.run(options).finally(async () => {
      // The stream may never have opened (the connection failed): nothing is left to cancel then.
      await this.source.unsubscribe().catch(() => undefined);
      options.onEnd();
    });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.wakeup.wake();
    await this.done.catch(() => undefined);
  }

  private async run(options: CatchUpOptions): Promise<void> {
    const { batchSize, wholeTransactions: whole } = options;
    let after = options.after;
    const queue: RecordedEvent[] = [];
    while (!this.stopping) {
      this.wakeup.reset();
      // Taken from the client only up to what decides the next batch: the rest waits there.
      for (let resolved: AllStreamResolvedEvent | null; !batchDecided(queue, batchSize, whole) && (resolved = this.source.read() as AllStreamResolvedEvent | null) !== null; ) {
        const event = toRecordedEvent(resolved);
        if (event !== undefined && isAfter(event, after)) queue.push(event);
      }
      if (this.stopping) return;
      if (queue.length > 0) {
        const batch = queue.splice(0, batchLength(queue, batchSize, whole));
        await options.handler(batch);
        after = batch.at(-1)!.position;
        continue;
      }
      if (this.failure !== undefined) throw this.failure.error;
      if (this.ended) throw new Error('EventStoreDB ended the $all subscription');
      await this.wakeup.sleep(options.idleMs);
    }
  }
}

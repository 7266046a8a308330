import { Wakeup } from '../../wakeup.js';
import type { GlobalPosition, RecordedEvent, Subscription } from '../../../domain/ports/event-store.js';

export interface PollingSubscriptionOptions {
  /** Events strictly after `after`, in global order, at most `maxCount`. */
  readonly read: (after: GlobalPosition, maxCount: number) => Promise<RecordedEvent[]>;
  readonly handler: (events: readonly RecordedEvent[]) => Promise<void>;
  readonly after: GlobalPosition;
  readonly batchSize: number;
  readonly pollIntervalMs: number;
  /** Starts whatever calls `wake` when new events may be readable; closed when the subscription ends. */
  readonly listen: (wake: () => void) => { start(): void; close(): Promise<void> };
  readonly onEnd: () => void;
}

/**
 * Catch-up loop: read a batch after the last position, hand it over, and when caught up wait for
 * a wake-up or the poll interval, whichever comes first. Notifications are only a hint: an event
 * can be committed and still unreadable because an older transaction is open (the read stops at
 * the snapshot's xmin), in which case its notification finds nothing and the next poll gets it.
 * A failing read ends the subscription like a failing handler: its owner decides what to restart.
 */
export class PollingSubscription implements Subscription {
  readonly done: Promise<void>;
  private stopping = false;
  private readonly wakeup = new Wakeup();

  constructor(options: PollingSubscriptionOptions) {
    const listener = options.listen(() => this.wakeup.wake());
    listener.start();
    this.done = this.run(options).finally(async () => {
      await listener.close();
      options.onEnd();
    });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.wakeup.wake();
    await this.done.catch(() => undefined);
  }

  private async run(options: PollingSubscriptionOptions): Promise<void> {
    let after = options.after;
    while (!this.stopping) {
      this.wakeup.reset();
      const events = await options.read(after, options.batchSize);
      if (this.stopping) return;
      if (events.length > 0) {
        await options.handler(events);
        after = events.at(-1)!.position;
      }
      if (events.length < options.batchSize) await this.wakeup.sleep(options.pollIntervalMs);
    }
  }
}

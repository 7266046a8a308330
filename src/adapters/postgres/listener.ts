import pg from 'pg';
import type { DatabaseOutages } from './outage.js';

type Handler = (payload: string | undefined) => void;

/**
 * One dedicated connection LISTENing on every channel a process cares about (the queue's sends,
 * lost leases, the events of async runners), reconnected in the background whenever it drops.
 * One, not one per channel or per worker: on PostgreSQL 15 a NOTIFY makes every listening
 * connection of the database read the notification queue, a transaction each, whatever its
 * channels. Notifications only wake readers (the query is the truth), so a lost connection costs
 * latency, not events: each handler is called with `undefined` once its channel is listened to
 * and after each reconnect, since it may have missed some. Handlers must not throw.
 */
export class Notifications {
  private client: pg.Client | undefined;
  private connected = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private readonly handlers = new Map<string, Set<Handler>>();

  constructor(
    private readonly config: pg.ClientConfig,
    /** Told when the connection drops and when it is back (the outage's one log line each). */
    private readonly outages?: DatabaseOutages,
    private readonly reconnectDelayMs = 1000,
  ) {}

  /** Calls `handler` with each payload sent on `channel` (and `undefined` as above) until stop(). */
  listen(channel: string, handler: Handler): { stop(): Promise<void> } {
    let set = this.handlers.get(channel);
    const fresh = set === undefined;
    if (set === undefined) this.handlers.set(channel, (set = new Set()));
    set.add(handler);
    if (this.client === undefined) this.connect();
    else if (this.connected) {
      const client = this.client;
      const ready = fresh ? client.query(`LISTEN ${client.escapeIdentifier(channel)}`).then(() => undefined) : Promise.resolve();
      ready.then(
        () => (set.has(handler) ? handler(undefined) : undefined),
        () => undefined,
      );
    }
    let stopped = false;
    return {
      stop: async () => {
        if (stopped) return;
        stopped = true;
        set.delete(handler);
        if (set.size === 0) this.handlers.delete(channel);
        if (this.handlers.size === 0) await this.close();
      },
    };
  }

  private connect(): void {
    const client = new pg.Client(this.config);
    this.client = client;
    this.connected = false;
    // Called for 'error', 'end' and a failed connect alike; only the current client may reconnect.
    const drop = (error?: Error): void => {
      if (this.client !== client) return;
      if (error !== undefined) this.outages?.failed(error);
      this.client = undefined;
      this.connected = false;
      client.end().catch(() => undefined);
      if (this.handlers.size > 0) this.reconnectTimer = setTimeout(() => this.connect(), this.reconnectDelayMs);
    };
    client.on('error', drop);
    client.on('end', () => drop());
    client.on('notification', (message) => {
      for (const handler of [...(this.handlers.get(message.channel) ?? [])]) handler(message.payload);
    });
    client
      .connect()
      .then(async () => {
        // The map's iterator also visits channels added while it awaits.
        for (const channel of this.handlers.keys()) await client.query(`LISTEN ${client.escapeIdentifier(channel)}`);
        if (this.client !== client) return;
        this.connected = true;
        this.outages?.answered();
        for (const set of [...this.handlers.values()]) for (const handler of [...set]) handler(undefined);
      })
      .catch(drop);
  }

  private async close(): Promise<void> {
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = undefined;
    this.connected = false;
    await client?.end().catch(() => undefined);
  }
}

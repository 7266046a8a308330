import pg from 'pg';

/**
 * A dedicated connection LISTENing on one channel, reconnected in the background whenever it
 * drops. Notifications only wake readers (the query is the truth), so a lost connection costs
 * latency, not events: `onWake(undefined)` after each (re)connect tells the owner it may have
 * missed some.
 */
export class NotificationListener {
  private client: pg.Client | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly channel: string,
    private readonly onWake: (payload: string | undefined) => void,
    private readonly reconnectDelayMs = 1000,
  ) {}

  start(): void {
    const client = new pg.Client(this.config);
    this.client = client;
    // Called for 'error', 'end' and a failed connect alike; only the current client may reconnect.
    const drop = (): void => {
      if (this.client !== client) return;
      this.client = undefined;
      client.end().catch(() => undefined);
      if (!this.closed) this.reconnectTimer = setTimeout(() => this.start(), this.reconnectDelayMs);
    };
    client.on('error', drop);
    client.on('end', drop);
    client.on('notification', (message) => {
      if (message.channel === this.channel) this.onWake(message.payload);
    });
    client
      .connect()
      .then(() => client.query(`LISTEN ${client.escapeIdentifier(this.channel)}`))
      .then(() => {
        if (this.client === client) this.onWake(undefined);
      }, drop);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}

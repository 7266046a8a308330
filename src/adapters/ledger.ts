import pg from 'pg';
import { enqueueMany, keyEventId, type EnqueueInput, type Enqueued } from '../commands/enqueue.js';
import { KeyCommandHandler, type CommandResult, type KeyCommand } from '../commands/key-command-handler.js';
import type { Loaded } from '../commands/key-state-loader.js';
import type { Command } from '../domain/commands.js';
import type { EventStore, JsonObject } from '../domain/ports/event-store.js';
import type { Logger } from '../domain/ports/logger.js';
import { keyStream } from '../domain/streams.js';
import { PostgresEventStore } from './eventstore/postgres/postgres-event-store.js';
import { createLogger } from './logging/logger.js';
import { migrate } from './postgres/migrations.js';
import { PostgresSnapshotStore } from './postgres/postgres-snapshot-store.js';

export interface LedgerOptions {
  /** PostgreSQL holding the ledger. Either this or `pool`. */
  readonly databaseUrl?: string;
  /** A pool the caller owns (not ended by close()). */
  readonly pool?: pg.Pool;
  /** Connections of the pool created from databaseUrl (default 10). */
  readonly poolSize?: number;
  readonly logger?: Logger;
  /** Epoch ms; injected by tests. */
  readonly clock?: () => number;
  readonly random?: () => number;
  /** Snapshot every N events of a key (default 1000; 0 disables). */
  readonly snapshotEvery?: number;
  /** Create or upgrade the schema on open (default true). */
  readonly migrate?: boolean;
}

/**
 * The library entry: the key ledger on PostgreSQL. Enqueue jobs with concurrency keys; every
 * admission, park, promotion and release is decided by the key's decider and appended with
 * optimistic concurrency to the key's stream.
 */
export class Ledger {
  private constructor(
    readonly store: EventStore,
    private readonly handler: KeyCommandHandler,
    private readonly pool: pg.Pool,
    private readonly ownsPool: boolean,
    private readonly clock: () => number,
  ) {}

  static async open(options: LedgerOptions): Promise<Ledger> {
    const pool = options.pool ?? createPool(options);
    try {
      if (options.migrate !== false) await migrate(pool);
      const store = new PostgresEventStore(pool);
      const clock = options.clock ?? Date.now;
      const handler = new KeyCommandHandler(
        {
          store,
          snapshots: new PostgresSnapshotStore(pool),
          clock,
          random: options.random ?? Math.random,
          logger: options.logger ?? createLogger(),
        },
        { snapshotEvery: options.snapshotEvery ?? 1_000, eventId: keyEventId },
      );
      return new Ledger(store, handler, pool, options.pool === undefined, clock);
    } catch (error) {
      if (options.pool === undefined) await pool.end();
      throw error;
    }
  }

  /** Records the job and admits it (a slot), parks it (key at its limit) or schedules it (due later). */
  async enqueue(input: EnqueueInput, metadata?: JsonObject): Promise<Enqueued> {
    const [result] = await this.enqueueMany([input], metadata);
    return result!;
  }

  /** Many jobs, over any keys, in one transaction; each key's jobs admitted against its limit in order. */
  enqueueMany(inputs: readonly EnqueueInput[], metadata?: JsonObject): Promise<Enqueued[]> {
    return enqueueMany(this.handler, inputs, {
      now: this.clock,
      recorded: (ids) => this.store.recordedEventIds(ids),
      ...(metadata ? { metadata } : {}),
    });
  }

  /** Decides one command on a stream (see src/domain/commands.ts) and appends its events. */
  execute(stream: string, command: Command, metadata?: JsonObject): Promise<CommandResult> {
    return this.handler.execute(stream, command, metadata);
  }

  /** Decides commands over many streams and appends them in one transaction. */
  executeMany(items: readonly KeyCommand[]): Promise<CommandResult[]> {
    return this.handler.executeMany(items);
  }

  /** A key's current state: limit, holders with their leases, parked and scheduled jobs. */
  keyState(key: string): Promise<Loaded> {
    return this.handler.load(keyStream(key));
  }

  async close(): Promise<void> {
    await this.store.close();
    if (this.ownsPool) await this.pool.end();
  }
}

const createPool = (options: LedgerOptions): pg.Pool => {
  if (!options.databaseUrl) throw new TypeError('databaseUrl: required (or pass a pg.Pool as pool)');
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: options.poolSize ?? 10 });
  // An idle client losing its connection must not crash the process; the next query reconnects.
  pool.on('error', (error) => (options.logger ?? createLogger()).warn({ err: error }, 'idle PostgreSQL connection lost'));
  return pool;
};

export const createLedger = (options: LedgerOptions): Promise<Ledger> => Ledger.open(options);

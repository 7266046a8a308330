import pg from 'pg';
import { enqueueMany, keyEventId, type EnqueueInput, type Enqueued } from '../commands/enqueue.js';
import { KeyCommandHandler, type CommandResult, type KeyCommand } from '../commands/key-command-handler.js';
import type { Loaded } from '../commands/key-state-loader.js';
import type { Command } from '../domain/commands.js';
import type { EventStore, JsonObject } from '../domain/ports/event-store.js';
import type { Logger } from '../domain/ports/logger.js';
import { keyStream } from '../domain/streams.js';
import { createDispatcher } from '../projections/dispatcher.js';
import { createReadModelProjections } from '../projections/read-models.js';
import type { Projection } from '../projections/projection.js';
import { AsyncProjectionRunner, inlineProjections, type SendMessages } from '../projections/runner.js';
import { PostgresEventStore } from './eventstore/postgres/postgres-event-store.js';
import { createLogger } from './logging/logger.js';
import { migrate } from './postgres/migrations.js';
import { PostgresSnapshotStore } from './postgres/postgres-snapshot-store.js';
import { PgQueue } from './queue/pg-queue.js';
import { inputFor, isJobDefinition, type JobDefinition, type JobOverrides } from './worker/define-job.js';
import { Sweeper } from './worker/sweeper.js';
import { Worker, type WorkerOptions } from './worker/worker.js';

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
  /**
   * Apply the read models (jl_*) and the dispatcher (queue messages) inside each append's
   * transaction (default true). Turn off only where they run elsewhere (async runners).
   */
  readonly inlineProjections?: boolean;
  /** Between the sweeper's runs once start() is called (default 1000 ms). */
  readonly sweepIntervalMs?: number;
}

/** How the ledger's projections (read models, dispatcher) are applied. */
export type ProjectionMode = 'inline' | 'async';

/**
 * The library entry: the key ledger on PostgreSQL. Enqueue jobs with concurrency keys; every
 * admission, park, promotion and release is decided by the key's decider and appended with
 * optimistic concurrency to the key's stream.
 */
export class Ledger {
  private readonly workers = new Set<Worker>();
  private readonly sweeper: Sweeper;
  private readonly runners: AsyncProjectionRunner[];

  private constructor(
    readonly store: EventStore,
    readonly queue: PgQueue,
    private readonly handler: KeyCommandHandler,
    private readonly pool: pg.Pool,
    private readonly ownsPool: boolean,
    private readonly clock: () => number,
    private readonly log: Logger,
    sweepIntervalMs: number | undefined,
    /** The projections applied by this ledger's async runners once start() is called; none when they run inline. */
    readonly asyncProjections: readonly Projection[],
    send: SendMessages,
  ) {
    this.sweeper = new Sweeper(this, pool, log.child({ component: 'sweeper' }), sweepIntervalMs === undefined ? {} : { intervalMs: sweepIntervalMs });
    this.runners = asyncProjections.map(
      (projection) => new AsyncProjectionRunner({ pool, store, projection, send, logger: log.child({ component: 'projection' }) }),
    );
  }

  get projectionMode(): ProjectionMode {
    return this.asyncProjections.length > 0 ? 'async' : 'inline';
  }

  static async open(options: LedgerOptions): Promise<Ledger> {
    const pool = options.pool ?? createPool(options);
    try {
      if (options.migrate !== false) await migrate(pool);
      const queue = new PgQueue(pool);
      const send: SendMessages = (db, name, messages) => queue.sendBatch(name, messages, { db });
      const projections = [createReadModelProjections(), createDispatcher()];
      const async = options.inlineProjections === false;
      const store = new PostgresEventStore(pool, async ? {} : { inlineHandlers: [inlineProjections(projections, { send })] });
      const clock = options.clock ?? Date.now;
      const logger = options.logger ?? createLogger();
      const handler = new KeyCommandHandler(
        {
          store,
          snapshots: new PostgresSnapshotStore(pool),
          clock,
          random: options.random ?? Math.random,
          logger,
        },
        { snapshotEvery: options.snapshotEvery ?? 1_000, eventId: keyEventId },
      );
      return new Ledger(store, queue, handler, pool, options.pool === undefined, clock, logger, options.sweepIntervalMs, async ? projections : [], send);
    } catch (error) {
      if (options.pool === undefined) await pool.end();
      throw error;
    }
  }

  /**
   * Records the job and admits it (a slot), parks it (key at its limit) or schedules it (due
   * later). Given a defineJob() definition and its args, the key, limit and the rest come from the
   * definition, with `overrides` on top.
   */
  enqueue(input: EnqueueInput, metadata?: JsonObject): Promise<Enqueued>;
  enqueue<A>(job: JobDefinition<A>, args: A, overrides?: JobOverrides): Promise<Enqueued>;
  async enqueue<A>(first: EnqueueInput | JobDefinition<A>, second?: A | JsonObject, overrides?: JobOverrides): Promise<Enqueued> {
    const [result] = isJobDefinition(first)
      ? await this.enqueueMany([inputFor(first, second as A, overrides)])
      : await this.enqueueMany([first as EnqueueInput], second as JsonObject | undefined);
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

  /** How many of these jobs have finished (completed, dead, cancelled or discarded), from the jobs read model. */
  async finishedJobs(jobIds: readonly string[]): Promise<number> {
    const { rows } = await this.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM jl_jobs WHERE job_id = ANY($1) AND status IN ('completed', 'dead', 'cancelled', 'discarded')`,
      [jobIds],
    );
    return rows[0]?.n ?? 0;
  }

  /** A worker running jobs from one dispatch queue; call start() on it, and stop() to shut it down gracefully. */
  worker(options: WorkerOptions): Worker {
    const worker = new Worker(this, this.queue, this.log.child({ component: 'worker', queue: options.queue ?? 'default' }), options);
    this.workers.add(worker);
    return worker;
  }

  /**
   * Starts the background parts: the sweeper and, when the ledger was opened with inline
   * projections off, the async projection runners (one instance of each leads across processes).
   */
  start(): void {
    this.sweeper.start();
    for (const runner of this.runners) runner.start();
  }

  /** Stops the sweeper, the projection runners and any worker still running (gracefully), then closes the store. */
  async close(): Promise<void> {
    await this.sweeper.stop();
    await Promise.all(this.runners.map((r) => r.stop()));
    await Promise.all([...this.workers].map((w) => w.stop()));
    await this.store.close();
    if (this.ownsPool) await this.pool.end();
  }
}

/** The pool createLedger makes from `databaseUrl`; exported for a caller that shares it (the HTTP server's metrics). */
export const createPool = (options: LedgerOptions): pg.Pool => {
  if (!options.databaseUrl) throw new TypeError('databaseUrl: required (or pass a pg.Pool as pool)');
  // Pipelining lets a transaction send its projection statements together (src/projections/runner.ts).
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: options.poolSize ?? 10, pipeline: true } as pg.PoolConfig);
  // An idle client losing its connection must not crash the process; the next query reconnects.
  pool.on('error', (error) => (options.logger ?? createLogger()).warn({ err: error }, 'idle PostgreSQL connection lost'));
  return pool;
};

export const createLedger = (options: LedgerOptions): Promise<Ledger> => Ledger.open(options);

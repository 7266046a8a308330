import pg from 'pg';
import type { Logger } from '../domain/ports/logger.js';
import { ledgerProjections } from '../projections/ledger-projections.js';
import type { Projection } from '../projections/projection.js';
import type { RebuildOptions, Rebuilt } from '../projections/rebuild.js';
import type { Verified } from '../projections/verify.js';
import { defaultLogger } from './logging/default-logger.js';
import { isDistributed } from './postgres/distribution.js';
import { migrate } from './postgres/migrations.js';
import { outagesOf } from './postgres/outage.js';
import { finishedJobs } from './postgres/queries/finished-jobs.js';
import { keyDetail, type KeyDetail } from './postgres/queries/key-detail.js';
import { readLedgerMetrics, readLedgerSize, type LedgerMetrics, type LedgerSize } from './postgres/queries/ledger-metrics.js';
import { listJobs, type JobFilter, type JobPage } from './postgres/queries/list-jobs.js';
import { keyPage, type KeyPage, type KeyPageQuery } from './postgres/queries/key-page.js';
import { listKeys, type KeyRow } from './postgres/queries/list-keys.js';
import { readLedgerVersion, type LedgerVersion } from './postgres/queries/ledger-version.js';
import { listQueues, type QueueRow } from './postgres/queries/queues.js';
import { eventCount, rowCounts } from './postgres/queries/replay-counts.js';
import { listWorkers, type WorkerRow } from './postgres/queries/workers.js';

/** What opens a LedgerReader: the database, and the clock leases are judged by. */
export interface LedgerReaderOptions {
  /** PostgreSQL holding the ledger. Either this or `pool`. */
  readonly databaseUrl?: string;
  /** A pool the caller owns (not ended by close()). */
  readonly pool?: pg.Pool;
  /** Connections of the pool created from databaseUrl (default 10). */
  readonly poolSize?: number;
  readonly logger?: Logger;
  /** Epoch ms; injected by tests. */
  readonly clock?: () => number;
  /** Create or upgrade the schema on open (default true). */
  readonly migrate?: boolean;
  /**
   * When migrating: distribute the schema by key on Citus (src/adapters/postgres/distribution.ts).
   * 'auto' (the default): wherever the citus extension is installed; true: refuse a database
   * without it (NotCitusError); false: keep every table on the coordinator.
   */
  readonly distributed?: boolean | 'auto';
}

/** The pool a ledger makes from `databaseUrl`, its lost connections logged to `logger`. */
export const createPool = (options: LedgerReaderOptions & { readonly logger: Logger }): pg.Pool => {
  if (!options.databaseUrl) throw new TypeError('databaseUrl: required (or pass a pg.Pool as pool)');
  // Pipelining lets a transaction send its projection statements together (src/projections/apply.ts).
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: options.poolSize ?? 10, pipeline: true } as pg.PoolConfig);
  // An idle client losing its connection must not crash the process; the next query reconnects.
  outagesOf(pool, options.logger);
  return pool;
};

/**
 * The ledger's read side alone: its database and the queries of src/adapters/postgres/queries/
 * over it, and the rebuild of its projections from the ledger. Everything that reads the ledger
 * reads it here: the CLI's reading commands (`keys`, `workers`, `replay`), the HTTP routes and
 * /metrics (through the Ledger, which is this plus the write side). Opening it migrates the
 * schema and nothing more: no key writer, LISTEN connection or sweeper, and it records neither
 * the projection mode nor queue caps, which a command that writes no event has no say in.
 */
export class LedgerReader {
  protected constructor(
    protected readonly pool: pg.Pool,
    private readonly ownsPool: boolean,
    protected readonly clock: () => number,
    /** The ledger is distributed by key (Citus): a few reads ask each node for its shards' figures. */
    protected readonly distributed: boolean,
  ) {}

  static async open(options: LedgerReaderOptions): Promise<LedgerReader> {
    const pool = options.pool ?? createPool({ ...options, logger: options.logger ?? (await defaultLogger()) });
    try {
      if (options.migrate !== false) await migrate(pool, { distributed: options.distributed ?? 'auto' });
      return new LedgerReader(pool, options.pool === undefined, options.clock ?? Date.now, await isDistributed(pool));
    } catch (error) {
      if (options.pool === undefined) await pool.end();
      throw error;
    }
  }

  /** Epoch ms on the ledger's clock: what a reply's `now` says. */
  now(): number {
    return this.clock();
  }

  /** The names of the ledger's projections, in the order they apply (ledgerProjections). */
  get projections(): readonly string[] {
    return ledgerProjections().map((p) => p.projection.name);
  }

  /** How many of these jobs have finished (completed, dead, cancelled or discarded), from the jobs read model. */
  finishedJobs(jobIds: readonly string[]): Promise<number> {
    return finishedJobs(this.pool, jobIds);
  }

  /** Every concurrency key: limit, slots in use, parked and scheduled jobs, oldest wait, lease state (read models). */
  keys(): Promise<KeyRow[]> {
    return listKeys(this.pool, this.clock());
  }

  /**
   * A page of the keys, sorted and filtered in the database, with the totals over every key and
   * the keys needing attention grouped by cause (read models): what the dashboard reads, bounded
   * by the page, not the keys. Judged at `now` (default: the ledger's clock now).
   */
  keyPage(query: KeyPageQuery, now: number = this.clock()): Promise<KeyPage> {
    return keyPage(this.pool, query, now);
  }

  /**
   * One key's holders, parked jobs (promotion order) and scheduled jobs, the first `listed` of each
   * (default DEFAULT_DETAIL_LIST) with their counts; null for an unknown key (read models). Judged
   * at `now` (default: now).
   */
  keyDetail(key: string, now: number = this.clock(), listed?: number): Promise<KeyDetail | null> {
    return keyDetail(this.pool, key, now, listed);
  }

  /** What the polled reads depend on, at `now` (see LedgerVersion): a few index entries and small tables, not the reads. */
  version(now: number, unstartedAfterMs: number): Promise<LedgerVersion> {
    return readLedgerVersion(this.pool, now, unstartedAfterMs);
  }

  /** Jobs, newest first, by key and status, a page at a time (read model jl_jobs). */
  jobs(filter?: JobFilter): Promise<JobPage> {
    return listJobs(this.pool, filter);
  }

  /** Every worker seen within the last day, live ones first (the workers' presence). */
  workers(): Promise<WorkerRow[]> {
    return listWorkers(this.pool);
  }

  /** Every dispatch queue: its depth, what waits to be claimed and since when, live consumers. */
  queues(): Promise<QueueRow[]> {
    return listQueues(this.pool);
  }

  /** Events and bytes in the live table and the archive (estimates from the statistics). */
  ledgerSize(): Promise<LedgerSize> {
    return readLedgerSize(this.pool, { distributed: this.distributed });
  }

  /** /metrics' figures: totals, top keys, workers, ledger size and the lag of these async projections. */
  metrics(asyncProjections: readonly string[]): Promise<LedgerMetrics> {
    return readLedgerMetrics(this.pool, asyncProjections, { distributed: this.distributed });
  }

  /** Events in the live ledger table: what a rebuild reads, for its progress. */
  eventCount(): Promise<number> {
    return eventCount(this.pool);
  }

  /** Rebuilds one projection from the ledger in one transaction (src/projections/rebuild.ts), with the rows of its tables afterwards. */
  async rebuild(projection: Projection, options: RebuildOptions = {}): Promise<Rebuilt & { readonly rows: Record<string, number> }> {
    // Loaded here, not with the reader: `keys` and `workers` open a reader and must start at once.
    const { rebuild, rebuildSpec } = await import('../projections/rebuild.js');
    const rebuilt = await rebuild(this.pool, projection, options);
    return { ...rebuilt, rows: await rowCounts(this.pool, rebuildSpec(projection).tables) };
  }

  /** Replays one projection beside its live tables and reports where they differ, changing nothing (src/projections/verify.ts). */
  async verify(projection: Projection, options: RebuildOptions = {}): Promise<Verified> {
    const { verify } = await import('../projections/verify.js');
    return verify(this.pool, projection, options);
  }

  /** Ends the pool, when it was made from databaseUrl. */
  async close(): Promise<void> {
    if (this.ownsPool) await this.pool.end();
  }
}

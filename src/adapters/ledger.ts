import * as E from 'fp-ts/lib/Either.js';
import pg from 'pg';
import { audit, jobHistory, type Audit, type AuditDeps, type AuditTarget, type JobHistory, type JobHistoryInput } from '../commands/audit.js';
import type { ReadBudget } from '../commands/read-budget.js';
import * as deadJobs from '../commands/dead-jobs.js';
import { explainJob } from '../commands/explain.js';
import { enqueueMany, keyEventId, type EnqueueInput, type Enqueued } from '../commands/enqueue.js';
import { keyStateAt, type KeyStateAt } from '../commands/key-state-at.js';
import type { CommandResult, KeyCommand, Loaded } from '../commands/key-command.js';
import { KeyWriter } from '../commands/key-writer.js';
import * as operator from '../commands/operator-actions.js';
import type { Command } from '../domain/commands.js';
import type { EventStore, JsonObject } from '../domain/ports/event-store.js';
import { QueueCapConflictError, RefusedError, UnknownKeyError } from '../domain/errors.js';
import type { Explanation } from '../domain/explain.js';
import type { Logger } from '../domain/ports/logger.js';
import { decodeRecorded } from '../domain/recorded.js';
import { keyStream, queueCapKey } from '../domain/streams.js';
import { Limit, QueueName, ValidationError, checkField } from '../domain/values.js';
import { LEASE_LOST_CHANNEL } from '../projections/dispatcher.js';
import { ledgerProjections, type LedgerProjection } from '../projections/ledger-projections.js';
import { AsyncProjectionRunner } from '../projections/runner.js';
import { PostgresEventStore } from './eventstore/postgres/postgres-event-store.js';
import { LedgerReader, createPool, type LedgerReaderOptions } from './ledger-reader.js';
import { defaultLogger } from './logging/default-logger.js';
import { ensureAppendWeeks } from './postgres/append-weeks.js';
import { archiveFinishedJobs, type ArchiveOptions, type ArchiveResult } from './postgres/archive.js';
import { Notifications } from './postgres/listener.js';
import { outagesOf, waitingForDatabase, type DatabaseOutages } from './postgres/outage.js';
import { migrate } from './postgres/migrations.js';
import { PostgresSnapshotStore } from './postgres/postgres-snapshot-store.js';
import { DistributedAsyncError, isDistributed } from './postgres/distribution.js';
import { projectionMode, type ProjectionMode } from './postgres/projection-mode.js';
import { jobStreamOf } from './postgres/queries/job-stream.js';
import { deadJobsOf } from './postgres/queries/dead-jobs.js';
import { limitLine } from './postgres/queries/limit-line.js';
import { JobQueue } from './queue/job-queue.js';
import { inputFor, isJobDefinition, type JobDefinition, type JobOverrides } from './worker/define-job.js';
import { Sweeper } from './worker/sweeper.js';
import { Worker, type WorkerOptions } from './worker/worker.js';

export type { ProjectionMode } from './postgres/projection-mode.js';
export { LedgerReader, createPool, type LedgerReaderOptions } from './ledger-reader.js';

export interface LedgerOptions extends LedgerReaderOptions {
  /** [0, 1): the jitter of retries and back-offs (the key writer's, the sweeper's); injected by tests. */
  readonly random?: () => number;
  /** Snapshot every N events of a key (default 1000; 0 disables). */
  readonly snapshotEvery?: number;
  /** Keep the snapshot as a past state every N events of a key, for reads of a past moment (default 10,000, a multiple of snapshotEvery; 0 keeps none). */
  readonly snapshotsKeptEvery?: number;
  /**
   * Apply the read models (jl_*) and the dispatcher (queue messages) inside each flush's
   * transaction (true) or from async runners started by start() (false). A database is projected
   * one way (ledger_settings records it when the first ledger opens it): the default follows the
   * database, and asking for the other way fails with ProjectionModeError.
   */
  readonly inlineProjections?: boolean;
  /** Between the sweeper's runs once start() is called (default 1000 ms). */
  readonly sweepIntervalMs?: number;
  /**
   * How long open() waits for a database that does not answer yet (retrying with backoff, one
   * log line) before it fails; default 0: fail at once. Long-running processes (the CLI's
   * `worker` and `serve`) wait without limit.
   */
  readonly waitForDatabaseMs?: number;
  /**
   * Queues with a cap of their own across every process (velocious' `queues[name].maxConcurrent`):
   * each job of the queue is also under the limit key `queue:<name>`. The cap lives in the ledger:
   * the first process to name it records it (KeyLimitSet, by "config"); every enqueue of every
   * process reads it from there, whether or not that process was given any cap; a process naming
   * another cap than the ledger's is refused (QueueCapConflictError). Changing a cap is an
   * operator's action: setLimit on the key `queue:<name>`, recorded with who.
   */
  readonly queues?: QueueCaps;
  /**
   * false: open() does not make the ledger's coming weeks' partitions (migration 17), a
   * transaction of its own: for a process that only reads (the CLI's explain, job, audit, state).
   * Nothing depends on it: the first write of a week without its partition makes them. Default true.
   */
  readonly makeWeeks?: boolean;
}

export type QueueCaps = Readonly<Record<string, { readonly maxConcurrent: number }>>;

/** How a read of the ledger itself may go: `budget`, past which it stops with ReadBudgetError (serve's routes give one). */
export interface LedgerReads {
  readonly budget?: ReadBudget;
}

/** A key's state folded up to a point, or, when it had no event yet then, when its first was. */
export type KeyStateAsOf = KeyStateAt | { readonly firstEventAt: number };

interface LedgerParts {
  readonly notifications: Notifications;
  readonly outages: DatabaseOutages;
  readonly store: PostgresEventStore;
  readonly queue: JobQueue;
  readonly writer: KeyWriter;
  readonly pool: pg.Pool;
  readonly ownsPool: boolean;
  readonly clock: () => number;
  readonly random: () => number;
  readonly log: Logger;
  readonly mode: ProjectionMode;
  readonly projections: readonly LedgerProjection[];
  readonly sweepIntervalMs: number | undefined;
  /** Distributed by key (Citus). */
  readonly distributed: boolean;
}

/**
 * The library entry: the key ledger on PostgreSQL. Enqueue jobs with concurrency keys; every
 * admission, park, promotion and release is decided by the key's decider and appended with
 * optimistic concurrency to the key's stream, by this process's one key writer.
 *
 * What goes through it (one pool, one clock, one LISTEN connection per process):
 * - writes: enqueue, execute, the operator actions and dead-job retries, all by the one KeyWriter;
 * - the projections of ledgerProjections() (src/projections/ledger-projections.ts): inline in the
 *   store's appends, or one AsyncProjectionRunner each, started by start();
 * - the sweeper, the workers (worker()) and the wake-ups of the dispatch queues they read (queue);
 * - reads of the ledger itself: keyState, keyStateAt, audit, jobHistory, explain, archive;
 * - reads of the read models and the workers' presence, as LedgerReader (keys, keyDetail, jobs,
 *   workers, finishedJobs; rebuild and verify), each query in src/adapters/postgres/queries/.
 * The CLI's commands and the HTTP server reach the database through it (or, read-only, through
 * LedgerReader.open); `jobledger keys` alone reads the read models on a bare pool, for speed.
 */
export class Ledger extends LedgerReader {
  readonly store: EventStore;
  /** The dispatch queues' wake-ups (a queue's messages are its jobs' jl_jobs rows, claimed by the key writer). */
  readonly queue: JobQueue;
  readonly projectionMode: ProjectionMode;
  private readonly writer: KeyWriter;
  private readonly notifications: Notifications;
  private readonly outages: DatabaseOutages;
  private readonly random: () => number;
  private readonly log: Logger;
  /** The workers worker() made and that are not stopped yet: close() stops them (a stopped one leaves, so a process making workers over and over keeps none). */
  private readonly made = new Set<Worker>();
  private readonly sweeper: Sweeper;
  private readonly runners: AsyncProjectionRunner[];
  /** Where reads of a past moment start folding (snapshots_kept). */
  private readonly snapshots = new PostgresSnapshotStore(this.pool);

  private constructor(parts: LedgerParts) {
    super(parts.pool, parts.ownsPool, parts.clock, parts.distributed);
    ({ notifications: this.notifications, outages: this.outages, store: this.store, queue: this.queue, writer: this.writer, random: this.random, log: this.log } = parts);
    this.projectionMode = parts.mode;
    this.sweeper = new Sweeper(this.writer, this.pool, this.log.child({ component: 'sweeper' }), {
      clock: this.clock,
      random: this.random,
      outages: this.outages,
      ...(parts.sweepIntervalMs === undefined ? {} : { intervalMs: parts.sweepIntervalMs }),
    });
    this.runners =
      parts.mode === 'async'
        ? parts.projections.map(
            ({ projection, follows }) =>
              new AsyncProjectionRunner({ pool: this.pool, store: parts.store, name: projection.name, projections: [projection], ...(follows ? { follows } : {}), logger: this.log.child({ component: 'projection' }), outages: this.outages }),
          )
        : [];
  }

  /** Admissions are dispatched inside the append (inline projections): workers may hand off directly. */
  get directHandoff(): boolean {
    return this.projectionMode === 'inline';
  }

  static override async open(options: LedgerOptions): Promise<Ledger> {
    const caps = checkQueueCaps(options.queues ?? {});
    const log = options.logger ?? (await defaultLogger());
    const pool = options.pool ?? createPool({ ...options, logger: log });
    try {
      const clock = options.clock ?? Date.now;
      const random = options.random ?? Math.random;
      const outages = outagesOf(pool, log);
      const wanted = options.inlineProjections === undefined ? undefined : options.inlineProjections ? 'inline' : 'async';
      const { mode, distributed } = await waitingForDatabase(
        async () => {
          if (options.migrate !== false) await migrate(pool, { distributed: options.distributed ?? 'auto' });
          // This week's partition of the ledger, and the next ones (migration 17), whoever sweeps.
          if (options.makeWeeks !== false) await ensureAppendWeeks(pool);
          return { mode: await projectionMode(pool, wanted), distributed: await isDistributed(pool) };
        },
        { outages, timeoutMs: options.waitForDatabaseMs ?? 0, random, clock: Date.now },
      );
      if (distributed && mode === 'async') throw new DistributedAsyncError();
      const projections = ledgerProjections();
      // One LISTEN connection for the whole process: queue wake-ups, lost leases, subscriptions.
      const notifications = new Notifications(pool.options, outages);
      const store = new PostgresEventStore(pool, { inline: mode === 'inline' ? projections.map((p) => p.projection) : [], notifyFlushes: mode === 'async', notifications, distributed });
      const writer = new KeyWriter(store, store, {
        clock,
        random,
        logger: log,
        snapshots: new PostgresSnapshotStore(pool),
        ...(options.snapshotEvery === undefined ? {} : { snapshotEvery: options.snapshotEvery }),
        ...(options.snapshotsKeptEvery === undefined ? {} : { snapshotsKeptEvery: options.snapshotsKeptEvery }),
        eventId: keyEventId,
        outages,
      });
      await declareQueueCaps(writer, caps);
      return new Ledger({ notifications, outages, store, queue: new JobQueue(notifications), writer, pool, ownsPool: options.pool === undefined, clock, random, log, mode, projections, sweepIntervalMs: options.sweepIntervalMs, distributed });
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
    return enqueueMany(this.writer, inputs, {
      now: this.clock,
      recorded: (ids) => this.store.recordedEventIds(ids),
      ...(metadata ? { metadata } : {}),
    });
  }

  /** Decides one command on a stream (see src/domain/commands.ts) and appends its events. */
  execute(stream: string, command: Command, metadata?: JsonObject): Promise<CommandResult> {
    return this.writer.execute(stream, command, metadata);
  }

  /** Decides commands over many streams and appends them in one transaction. */
  executeMany(items: readonly KeyCommand[]): Promise<CommandResult[]> {
    return this.writer.executeMany(items);
  }

  /**
   * Resolves once every write submitted so far is written, with the follow-ups they caused (the
   * FillSlots of a line that waits on further limits): what a caller reading the ledger next sees.
   */
  drain(): Promise<void> {
    return this.writer.drain();
  }

  /** A key's current state: limit, holders with their leases, parked and scheduled jobs. */
  keyState(key: string): Promise<Loaded> {
    return this.writer.load(keyStream(key));
  }

  /**
   * A key's state folded from its stream after `revision`, or as decided by `at` (epoch ms); when
   * the key had no event yet then, when its first was. A key with no event at all is refused
   * (UnknownKeyError).
   */
  async keyStateAt(key: string, until: { readonly revision?: number; readonly at?: number }, reads: LedgerReads = {}): Promise<KeyStateAsOf> {
    const folded = await keyStateAt(this.store, keyStream(key), until, reads.budget, this.snapshots);
    if (folded.revision !== 'no_stream') return folded;
    const [first] = await this.store.readStream(keyStream(key), { fromRevision: 0, maxCount: 1 });
    if (first === undefined) throw new UnknownKeyError(key);
    return { firstEventAt: decodeRecorded(first).data.at };
  }

  /** Lease ids taken from their holders, as the dispatcher announces them (LEASE_LOST_CHANNEL). */
  watchLostLeases(lost: (leaseId: string) => void): { stop(): Promise<void> } {
    return this.notifications.listen(LEASE_LOST_CHANNEL, (leaseId) => {
      if (leaseId) lost(leaseId);
    });
  }

  /** Every slot handoff of a key or of one job, with the events, read from the ledger itself. */
  audit(target: AuditTarget, reads: LedgerReads = {}): Promise<Audit> {
    return audit(this.auditDeps(reads), target);
  }

  /**
   * Revokes the lease of one holder of the key (jobId) or of every holder, recorded with `by`. A
   * running holder's slot passes on once its handler stopped (the worker says so) or its lease
   * lapsed; `force` frees it at once, for a holder no handler runs (its worker is gone).
   */
  release(input: operator.ReleaseInput, metadata?: JsonObject): Promise<operator.Released> {
    return operator.release(this.operatorDeps, input, metadata);
  }

  /** Drops some parked jobs of the key (jobIds) or all of them, recorded with `by`. */
  discard(input: { readonly key: string; readonly jobIds?: readonly string[]; readonly by: string }, metadata?: JsonObject): Promise<{ discarded: string[] }> {
    return operator.discard(this.operatorDeps, input, metadata);
  }

  /** Changes the key's limit, recorded with `by`; a raise promotes parked jobs at once. */
  setLimit(input: { readonly key: string; readonly limit: number; readonly leaseMs?: number; readonly by: string }, metadata?: JsonObject): Promise<{ limit: number; promoted: string[] }> {
    return operator.setLimit(this.operatorDeps, input, metadata);
  }

  /** Pauses the key, recorded with `by` and `reason`: nothing new is admitted on it until resume(); holders finish. */
  pause(input: { readonly key: string; readonly by: string; readonly reason?: string }, metadata?: JsonObject): Promise<{ paused: true }> {
    return operator.pause(this.operatorDeps, input, metadata);
  }

  /** Resumes a paused key, recorded with `by` and `reason`; its free slots go to the parked jobs at once. */
  resume(input: { readonly key: string; readonly by: string; readonly reason?: string }, metadata?: JsonObject): Promise<{ promoted: string[] }> {
    return operator.resume(this.operatorDeps, input, metadata);
  }

  /** Cancels a job, recorded with `by`; false when it had already finished. */
  cancel(input: { readonly jobId: string; readonly by: string }, metadata?: JsonObject): Promise<operator.Cancelled> {
    return operator.cancel(this.operatorDeps, input, metadata);
  }

  /**
   * Dead jobs run again, recorded with `by`: each keeps its id, gets a fresh set of attempts and is
   * admitted like an arrival (a free slot, or the back of its line). Some by id, or every dead job
   * of a key. All or nothing: a job that is not dead is refused (RefusedError) and nothing is written.
   */
  retry(input: deadJobs.DeadJobsInput, metadata?: JsonObject): Promise<{ retried: deadJobs.Retried[] }> {
    return deadJobs.retry(this.deadJobDeps, input, metadata);
  }

  /** Dead jobs leave the failed list for good, recorded with `by` (DeadDiscarded); as retry, some by id or every one of a key. */
  discardDead(input: deadJobs.DeadJobsInput, metadata?: JsonObject): Promise<{ discarded: string[] }> {
    return deadJobs.discardDead(this.deadJobDeps, input, metadata);
  }

  /** Why a job is where it is (its place in line, what it waits on, its holders' leases, its waits), now or as of `at`, from the ledger. */
  explain(input: { readonly jobId: string; readonly at?: number | string | Date }, reads: LedgerReads = {}): Promise<Explanation> {
    return explainJob(
      {
        store: this.store,
        jobStream: this.jobStream,
        clock: this.clock,
        liveWorkers: async () => new Set((await this.workers()).filter((w) => w.state === 'live').map((w) => w.id)),
        load: (stream) => this.writer.load(stream),
        // A limit key's line from the read models, where they are written with the ledger (inline).
        ...(this.projectionMode === 'inline' ? { line: (stream: string, jobId: string) => limitLine(this.pool, stream, jobId) } : {}),
        ...reads,
      },
      input,
    );
  }

  /** A job's events across every stream it appears on (its key and its limit keys), in order, with who and why. */
  jobHistory(input: JobHistoryInput, reads: LedgerReads = {}): Promise<JobHistory> {
    return jobHistory(this.auditDeps(reads), input);
  }

  /**
   * Moves the events of jobs that finished before `before` (epoch ms) out of the live table into
   * events_archive; every reader of history reads both, so no answer changes (src/adapters/postgres/archive.ts).
   */
  archive(options: ArchiveOptions): Promise<ArchiveResult> {
    return archiveFinishedJobs(this.pool, options);
  }

  private get deadJobDeps(): deadJobs.DeadJobDeps {
    return {
      executeMany: (items, options) => this.writer.executeMany(items, options),
      load: (stream) => this.writer.load(stream),
      store: this.store,
      jobStream: this.jobStream,
      deadJobsOf: (key) => deadJobsOf(this.pool, key),
    };
  }

  private readonly jobStream = (jobId: string): Promise<string | null> => jobStreamOf(this.pool, jobId);

  private auditDeps(reads: LedgerReads): AuditDeps {
    return { store: this.store, jobStream: this.jobStream, load: (stream) => this.writer.load(stream), ...reads };
  }

  private get operatorDeps(): operator.OperatorDeps {
    return {
      execute: (stream, command, metadata) => this.writer.execute(stream, command, metadata),
      load: (stream) => this.writer.load(stream),
      jobStream: this.jobStream,
      random: this.random,
    };
  }

  /** A worker running jobs from one dispatch queue; call start() on it, and stop() to shut it down gracefully. */
  worker(options: WorkerOptions): Worker {
    const worker = new Worker(
      {
        writer: this.writer,
        queue: this.queue,
        db: this.pool,
        directHandoff: this.directHandoff,
        watchLostLeases: (lost) => this.watchLostLeases(lost),
        clock: this.clock,
        random: this.random,
        outages: this.outages,
        stopped: (stopped) => this.made.delete(stopped),
      },
      this.log.child({ component: 'worker', queue: options.queue ?? 'default' }),
      options,
    );
    this.made.add(worker);
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

  /** How late each of the sweeper's ticks started, in ms, once start() runs it (Sweeper.onTickLag; /metrics). */
  onSweeperTickLag(listener: (lagMs: number) => void): void {
    this.sweeper.onTickLag(listener);
  }

  /** Stops what start() started (the sweeper, the async projection runners); workers and writes go on. */
  async stop(): Promise<void> {
    await this.sweeper.stop();
    await Promise.all(this.runners.map((r) => r.stop()));
  }

  /** Stops the sweeper, the projection runners and any worker still running (gracefully), waits for the writer, then closes the store. */
  override async close(): Promise<void> {
    await this.stop();
    await Promise.all([...this.made].map((w) => w.stop()));
    await this.writer.drain();
    await this.store.close();
    await super.close();
  }
}

export const createLedger = (options: LedgerOptions): Promise<Ledger> => Ledger.open(options);

/** The queue caps, checked before anything is opened: the error names the field. */
const checkQueueCaps = (queues: QueueCaps): (readonly [string, number])[] => {
  if (typeof queues !== 'object' || queues === null) throw new ValidationError('queues', 'must be an object of queue name -> { maxConcurrent }');
  return Object.entries(queues).map(([queue, cap]) => {
    checkField(`queues.${queue}`, QueueName, queue);
    if (typeof cap !== 'object' || cap === null) throw new ValidationError(`queues.${queue}`, 'must be { maxConcurrent: n }');
    return [queue, checkField(`queues.${queue}.maxConcurrent`, Limit, cap.maxConcurrent)] as const;
  });
};

/**
 * Each cap declared as its queue key's limit (DeclareLimit): recorded by the first process that
 * names it, nothing when the ledger already says so, refused when the ledger holds another.
 */
const declareQueueCaps = async (writer: KeyWriter, caps: readonly (readonly [string, number])[]): Promise<void> => {
  if (caps.length === 0) return;
  const results = await writer.executeMany(caps.map(([queue, limit]) => ({ stream: keyStream(queueCapKey(queue)), command: { type: 'DeclareLimit', limit, by: 'config' }, metadata: { by: 'config', via: 'queues' } })));
  results.forEach((r, i) => {
    if (E.isRight(r)) return;
    const [queue, configured] = caps[i]!;
    throw r.left.tag === 'LimitMismatch' ? new QueueCapConflictError(queue, r.left.recorded, configured) : new RefusedError(r.left);
  });
};

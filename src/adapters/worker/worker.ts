import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import * as E from 'fp-ts/lib/Either.js';
import type { CommandResult, KeyCommand } from '../../commands/key-command-handler.js';
import type { Command } from '../../domain/commands.js';
import { describeDomainError } from '../../domain/errors.js';
import { ValidationError } from '../../domain/values.js';
import type { Logger } from '../../domain/ports/logger.js';
import { streamFor } from '../../domain/streams.js';
import type { DispatchMessage } from '../../projections/dispatcher.js';
import type { PgQueue, QueueMessage } from '../queue/pg-queue.js';
import { Wakeup } from '../wakeup.js';
import { Batcher } from './batcher.js';
import { handlerTable, type HandlerMap, type JobHandler } from './define-job.js';

/** The ledger as the worker uses it: decide and append commands over many keys in one transaction. */
export interface CommandExecutor {
  executeMany(items: readonly KeyCommand[]): Promise<CommandResult[]>;
  /** Whether admissions are dispatched inline, in the append: direct handoff needs it (see handedOffJobs). */
  readonly directHandoff: boolean;
  /** Name, args and key of jobs a worker started by direct handoff (their admissions got no message). */
  handedOffJobs(jobIds: readonly string[]): Promise<readonly HandedOffJob[]>;
  /** Calls `lost` with the lease id of each lease taken from its holder (revoked, expired), soon after it is. */
  watchLostLeases(lost: (leaseId: string) => void): { stop(): Promise<void> };
}

/** What a queue message would have told the worker of a job started by direct handoff. */
export type HandedOffJob = Pick<DispatchMessage, 'jobId' | 'key' | 'name' | 'args'>;

export interface WorkerOptions {
  readonly handlers: HandlerMap;
  /** The dispatch queue to read (default "default"). */
  readonly queue?: string;
  /** Handlers running at once (default 10). */
  readonly concurrency?: number;
  readonly workerId?: string;
  /** Polling when no notification arrives (default 1000 ms). */
  readonly pollIntervalMs?: number;
  /** How long stop() lets running handlers finish before yielding them (default 10 s). */
  readonly graceMs?: number;
  /** Visibility of a message read but not yet started (default 30 s); once started, the job's lease. */
  readonly visibilityMs?: number;
  /** Renew leases (default true; tests turn it off to let a lease lapse under a live handler). */
  readonly heartbeat?: boolean;
  /**
   * Direct handoff: a handler slot whose job ends takes over the job that release promotes on this
   * queue, started in the same append (no queue hop). It keeps doing so for this long from the
   * start of the first job of the run, then lets the next promotion go through the queue, so a
   * busy key holds a slot for at most about this long while jobs admitted before are waiting there
   * (default 1000 ms; 0 turns direct handoff off). A key never takes more slots than its limit.
   */
  readonly handoffSliceMs?: number;
}

interface Running {
  /** Its queue message; null for a job started by direct handoff (it has none). */
  readonly msgId: string | null;
  readonly stream: string;
  readonly jobId: string;
  readonly key: string | null;
  readonly leaseId: string;
  readonly leaseMs: number;
  readonly controller: AbortController;
  readonly done: Promise<void>;
  /** When the first job of this slot's run of direct handoffs started (this one's start if it came from the queue). */
  readonly sliceStartedAt: number;
  heartbeat: NodeJS.Timeout | undefined;
}

/** A job the ledger has just started for this worker, ready to run: its message's fields, and more. */
interface Admitted extends DispatchMessage {
  readonly msgId: string | null;
  readonly stream: string;
  readonly leaseMs: number;
  readonly sliceStartedAt: number;
}

type Finish = { readonly kind: 'complete' } | { readonly kind: 'fail'; readonly error: string };

/**
 * Runs admitted jobs from one dispatch queue: read a batch -> Start them in one transaction (a
 * stale or already started lease: archive, run nothing) -> run each handler with an AbortSignal,
 * renewing its lease every lease/3 (set_vt + Renew) -> Complete or Fail -> archive. Starts,
 * renewals and completions are grouped into transactions (Batcher) across keys, each key's append
 * with its own expected revision; the ledger, not the queue, decides, so a duplicate delivery
 * never runs a job twice and a reclaimed holder never frees a slot. A Complete or Fail may start
 * the job its release promotes in the same append (direct handoff, handoffSliceMs): that job runs
 * here with no message. A lease taken away (revoked, expired) aborts its handler as soon as the
 * dispatcher announces it.
 */
export class Worker {
  readonly workerId: string;
  private readonly queueName: string;
  private readonly concurrency: number;
  private readonly handoffSliceMs: number;
  private readonly handlers: ReadonlyMap<string, JobHandler>;
  private readonly running = new Map<string, Running>();
  private readonly renewals: Batcher<Running, boolean>;
  private readonly finishes: Batcher<{ readonly run: Running; readonly finish: Finish }, void>;
  private loop: Promise<void> | undefined;
  /** Aborts a running handler as soon as its lease is taken away; on until stop() has finished. */
  private leaseWatch: { stop(): Promise<void> } | undefined;
  private stopping = false;
  private readonly wakeup = new Wakeup();

  constructor(
    private readonly ledger: CommandExecutor,
    private readonly queue: PgQueue,
    private readonly log: Logger,
    private readonly options: WorkerOptions,
    /** The ledger's clock (epoch ms): decisions and the handoff slice share it. */
    private readonly clock: () => number = Date.now,
  ) {
    this.workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    this.queueName = options.queue ?? 'default';
    this.concurrency = options.concurrency ?? 10;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) throw new ValidationError('concurrency', 'must be an integer of 1 or more');
    const slice = options.handoffSliceMs ?? 1_000;
    if (!Number.isFinite(slice) || slice < 0) throw new ValidationError('handoffSliceMs', 'must be a duration of 0 ms or more');
    this.handoffSliceMs = ledger.directHandoff ? slice : 0;
    this.handlers = handlerTable(options.handlers);
    this.renewals = new Batcher((runs) => this.renewMany(runs));
    this.finishes = new Batcher((items) => this.finishMany(items));
  }

  /** Number of handlers running now. */
  get active(): number {
    return this.running.size;
  }

  start(): void {
    if (this.loop) return;
    const listener = this.queue.listen(this.queueName, () => this.wakeup.wake());
    this.leaseWatch = this.ledger.watchLostLeases((leaseId) => {
      const run = this.running.get(leaseId);
      if (run === undefined || run.controller.signal.aborted) return;
      this.log.warn({ jobId: run.jobId, leaseId }, 'lease revoked or expired: handler aborted');
      this.release(run, `lease ${leaseId} was revoked or expired`);
    });
    this.loop = this.readLoop().finally(() => listener.stop());
  }

  /**
   * Graceful shutdown: stop reading, let running handlers finish within the grace period, then
   * abort and yield the rest (their slots go back; no attempt is burned).
   */
  async stop(graceMs = this.options.graceMs ?? 10_000): Promise<void> {
    this.stopping = true;
    this.wakeup.wake();
    await this.loop;
    const deadline = new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref());
    await Promise.race([Promise.all([...this.running.values()].map((r) => r.done)), deadline]);
    const left = [...this.running.values()];
    if (left.length > 0) {
      for (const run of left) this.release(run, 'shutdown: yielded to another worker');
      const results = await this.ledger.executeMany(left.map((run) => this.command(run, { type: 'Yield', jobId: run.jobId, leaseId: run.leaseId })));
      this.log.info({ yielded: left.length, refused: results.filter(E.isLeft).length }, 'yielded running jobs at shutdown');
      await this.archive(left);
    }
    await this.finishes.drain();
    await this.leaseWatch?.stop();
  }

  private async readLoop(): Promise<void> {
    const pollMs = this.options.pollIntervalMs ?? 1_000;
    while (!this.stopping) {
      this.wakeup.reset();
      const free = this.concurrency - this.running.size;
      const messages = free > 0 ? await this.readBatch(free) : [];
      if (messages.length > 0) {
        try {
          await this.startBatch(messages);
        } catch (error) {
          // The messages stay in the queue and come back when their visibility lapses; the ledger
          // decides again then.
          this.log.error({ err: error }, 'starting a batch failed; retrying');
          await new Promise((resolve) => setTimeout(resolve, 1_000));
        }
        continue;
      }
      await this.wakeup.sleep(pollMs);
    }
  }

  private async readBatch(qty: number): Promise<QueueMessage<DispatchMessage>[]> {
    try {
      return await this.queue.read<DispatchMessage>(this.queueName, this.options.visibilityMs ?? 30_000, qty);
    } catch (error) {
      this.log.error({ err: error }, 'reading the queue failed; retrying');
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      return [];
    }
  }

  private command(run: { readonly stream: string }, command: Command): KeyCommand {
    return { stream: run.stream, command, metadata: { workerId: this.workerId } };
  }

  /** Starts a batch of admissions in one transaction; only the ones the ledger accepts run. */
  private async startBatch(messages: readonly QueueMessage<DispatchMessage>[]): Promise<void> {
    const starts = messages.map((m) => ({ m, stream: streamFor(m.message.key, m.message.jobId) }));
    const results = await this.ledger.executeMany(
      starts.map(({ m, stream }) => this.command({ stream }, { type: 'Start', jobId: m.message.jobId, leaseId: m.message.leaseId, workerId: this.workerId })),
    );
    const refused: string[] = [];
    results.forEach((result, i) => {
      const { m, stream } = starts[i]!;
      if (E.isLeft(result)) {
        this.log.info({ jobId: m.message.jobId, leaseId: m.message.leaseId, key: m.message.key }, `not run: ${describeDomainError(result.left)}`);
        refused.push(m.msgId);
        return;
      }
      const started = result.right.events.find((e) => e.type === 'JobStarted');
      if (started?.type !== 'JobStarted') throw new Error(`Start of ${m.message.jobId} decided no JobStarted`);
      const { jobId, key, leaseId, name, args } = m.message;
      const { attempt, expiresAt, at } = started.data;
      this.run({ msgId: m.msgId, stream, jobId, key, leaseId, name, args, attempt, leaseMs: expiresAt - at, sliceStartedAt: at });
    });
    if (refused.length > 0) await this.queue.archiveMany(this.queueName, refused);
  }

  private run(admitted: Admitted): void {
    const { msgId, stream, jobId, key, leaseId, name, args, attempt, leaseMs, sliceStartedAt } = admitted;
    const controller = new AbortController();
    const log = this.log.child({ jobId, key, leaseId, attempt });
    const handler = this.handlers.get(name);
    const run: Running = {
      msgId,
      stream,
      jobId,
      key,
      leaseId,
      leaseMs,
      controller,
      sliceStartedAt,
      heartbeat: undefined,
      // Deferred a tick so `run` exists when the handler's outcome is reported.
      done: Promise.resolve().then(() => this.execute(run, handler, name, args, attempt, log)),
    };
    if (this.options.heartbeat !== false) {
      run.heartbeat = setInterval(() => {
        void this.renewals.add(run).catch((error: unknown) => log.error({ err: error }, 'lease renewal failed'));
      }, Math.max(100, Math.floor(leaseMs / 3)));
    }
    this.running.set(leaseId, run);
    void run.done.finally(() => {
      const wasFull = this.running.size >= this.concurrency;
      this.running.delete(leaseId);
      // Only a loop held back by a full worker has something to read now; one with free slots was
      // already waiting for a notification (a wake here would cost a read of an empty queue per job).
      if (wasFull && this.running.size < this.concurrency) this.wakeup.wake();
    });
  }

  /** Runs the handler, then reports Complete or Fail, unless the run was aborted (lease lost, or yielded at shutdown). */
  private async execute(run: Running, handler: JobHandler | undefined, name: string, args: unknown, attempt: number, log: Logger): Promise<void> {
    let finish: Finish;
    try {
      if (!handler) throw new Error(`no handler for job name ${JSON.stringify(name)} in this worker (it knows: ${[...this.handlers.keys()].join(', ') || 'none'})`);
      await handler(args, { jobId: run.jobId, key: run.key, attempt, signal: run.controller.signal, log });
      finish = { kind: 'complete' };
    } catch (error) {
      finish = { kind: 'fail', error: error instanceof Error ? error.message : String(error) };
      if (!run.controller.signal.aborted) log.info({ err: error }, 'job failed');
    }
    clearInterval(run.heartbeat);
    if (run.controller.signal.aborted) return;
    try {
      await this.finishes.add({ run, finish });
    } catch (error) {
      // Not recorded: the lease lapses and the sweeper retries the job (delivery is at least once).
      log.error({ err: error, outcome: finish.kind }, 'recording the result failed');
    }
  }

  /** Aborts a run whose result will not be reported. */
  private release(run: Running, why: string): void {
    clearInterval(run.heartbeat);
    run.controller.abort(new Error(why));
  }

  /** One transaction renews every lease due; the queue's visibility follows. A refused renewal aborts its handler. */
  private async renewMany(runs: readonly Running[]): Promise<boolean[]> {
    const live = runs.filter((r) => !r.controller.signal.aborted);
    const results = await this.ledger.executeMany(live.map((run) => this.command(run, { type: 'Renew', jobId: run.jobId, leaseId: run.leaseId })));
    const renewed: Running[] = [];
    results.forEach((result, i) => {
      const run = live[i]!;
      if (E.isLeft(result)) {
        this.log.warn({ jobId: run.jobId, leaseId: run.leaseId }, `lease lost, handler aborted: ${describeDomainError(result.left)}`);
        this.release(run, describeDomainError(result.left));
      } else renewed.push(run);
    });
    for (const [leaseMs, group] of groupBy(renewed, (r) => r.leaseMs)) {
      const msgIds = messagesOf(group);
      if (msgIds.length > 0) await this.queue.setVtMany(this.queueName, msgIds, leaseMs);
    }
    const ok = new Set(renewed);
    return runs.map((r) => ok.has(r));
  }

  /**
   * One transaction completes or fails every finished job, each handing its slot's next job
   * straight to this worker while its slice lasts (handoffSliceMs); then the finished messages are archived
   * while the handed-off jobs' names and args are read, and those jobs run.
   */
  private async finishMany(items: readonly { readonly run: Running; readonly finish: Finish }[]): Promise<void[]> {
    const results = await this.ledger.executeMany(
      items.map(({ run, finish }) => {
        const inSlice = this.clock() - run.sliceStartedAt < this.handoffSliceMs;
        const handOff = !this.stopping && inSlice ? { handOffTo: { workerId: this.workerId, queue: this.queueName } } : {};
        return this.command(
          run,
          finish.kind === 'complete'
            ? { type: 'Complete', jobId: run.jobId, leaseId: run.leaseId, ...handOff }
            : { type: 'Fail', jobId: run.jobId, leaseId: run.leaseId, error: finish.error, jitter: Math.random(), ...handOff },
        );
      }),
    );
    const handedOff: Omit<Admitted, 'name' | 'args' | 'key'>[] = [];
    results.forEach((result, i) => {
      const { run } = items[i]!;
      if (E.isLeft(result)) {
        this.log.warn({ jobId: run.jobId }, `result not recorded: ${describeDomainError(result.left)}`);
        return;
      }
      for (const e of result.right.events) {
        if (e.type !== 'JobStarted' || e.data.workerId !== this.workerId) continue;
        const { jobId, leaseId, attempt, expiresAt, at } = e.data;
        handedOff.push({ msgId: null, stream: run.stream, jobId, leaseId, attempt, leaseMs: expiresAt - at, sliceStartedAt: run.sliceStartedAt });
      }
    });
    await Promise.all([this.archive(items.map(({ run }) => run)), handedOff.length > 0 ? this.runHandedOff(handedOff) : undefined]);
    return items.map(() => undefined);
  }

  /** Runs the jobs this worker started by direct handoff; at shutdown it gives them back instead. */
  private async runHandedOff(started: readonly Omit<Admitted, 'name' | 'args' | 'key'>[]): Promise<void> {
    if (this.stopping) {
      await this.ledger.executeMany(started.map((s) => this.command(s, { type: 'Yield', jobId: s.jobId, leaseId: s.leaseId })));
      return;
    }
    let jobs: ReadonlyMap<string, HandedOffJob>;
    try {
      jobs = new Map((await this.ledger.handedOffJobs(started.map((s) => s.jobId))).map((j) => [j.jobId, j]));
    } catch (error) {
      // Their leases lapse and the sweeper retries them: delivery stays at least once.
      this.log.error({ err: error, jobIds: started.map((s) => s.jobId) }, 'reading handed-off jobs failed; their leases will expire');
      return;
    }
    for (const s of started) {
      const job = jobs.get(s.jobId);
      if (job === undefined) this.log.error({ jobId: s.jobId, leaseId: s.leaseId }, 'handed-off job not found in dispatch_jobs; its lease will expire');
      else this.run({ ...s, key: job.key, name: job.name, args: job.args });
    }
  }

  private async archive(runs: readonly Running[]): Promise<void> {
    const msgIds = messagesOf(runs);
    if (msgIds.length > 0) await this.queue.archiveMany(this.queueName, msgIds);
  }
}

const messagesOf = (runs: readonly Running[]): string[] => runs.flatMap((r) => (r.msgId === null ? [] : [r.msgId]));

const groupBy = <T, K>(items: readonly T[], keyOf: (t: T) => K): Map<K, T[]> => {
  const groups = new Map<K, T[]>();
  for (const item of items) groups.set(keyOf(item), [...(groups.get(keyOf(item)) ?? []), item]);
  return groups;
};

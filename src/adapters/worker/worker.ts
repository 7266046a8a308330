import { hostname } from 'node:os';
import { randomUUID } from 'node:crypto';
import * as E from 'fp-ts/lib/Either.js';
import type { CommandResult, KeyCommand, ReadAndStart, ReadStarted, StartedJob } from '../../commands/key-command.js';
import { MAX_YIELD_DELAY_MS, type Command } from '../../domain/commands.js';
import { describeDomainError } from '../../domain/errors.js';
import type { DispatchMessage, HandedOffJob } from '../../domain/ports/ledger-store.js';
import type { Outages } from '../../domain/ports/outages.js';
import type { Logger } from '../../domain/ports/logger.js';
import { ValidationError, escapeUnstorable } from '../../domain/values.js';
import type { Queryable } from '../../projections/transaction.js';
import type { JobQueue } from '../queue/job-queue.js';
import { Wakeup } from '../wakeup.js';
import { handlerTable, type HandlerMap, type JobHandler } from './define-job.js';
import { WORKER_DEFAULTS } from './defaults.js';
import { Presence } from './presence.js';

/** What a worker needs of the ledger. */
export interface WorkerDeps {
  /** The process's key writer: every start, renewal and result goes through it (and into its group commit). */
  readonly writer: {
    executeMany(items: readonly KeyCommand[]): Promise<CommandResult[]>;
    readAndStart(request: ReadAndStart): Promise<ReadStarted>;
  };
  readonly queue: Pick<JobQueue, 'listen'>;
  /** The ledger's database, for what the worker tells operators about itself (its presence row). */
  readonly db: Queryable;
  /** Whether admissions are dispatched inline, in the append: direct handoff needs it. */
  readonly directHandoff: boolean;
  /** Calls `lost` with the lease id of each lease taken from its holder (revoked, expired), soon after it is. */
  watchLostLeases(lost: (leaseId: string) => void): { stop(): Promise<void> };
  /** The ledger's clock (epoch ms): decisions and the handoff slice share it. */
  readonly clock: () => number;
  readonly random: () => number;
  /** Told of a failure the database's absence explains (logged once per outage there, not here). */
  readonly outages: Outages;
  /** Called once stop() has finished: whoever keeps the worker (the Ledger, to stop it at close) lets it go. */
  readonly stopped?: (worker: Worker) => void;
}

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
  /** Renew leases (default true; tests turn it off to let a lease lapse under a live handler). */
  readonly heartbeat?: boolean;
  /** How often the worker refreshes its presence row (default 5 s, see PRESENCE_INTERVAL_MS_DEFAULT); it is called gone after 3 of these unseen. */
  readonly presenceIntervalMs?: number;
  /**
   * Direct handoff: a handler slot whose job ends takes over the job that release promotes on this
   * queue, started in the same append (no queue hop). It keeps doing so for this long from the
   * start of the first job of the run, then lets the next promotion go through the queue, so a
   * busy key holds a slot for at most about this long while jobs admitted before are waiting there
   * (default 1000 ms; 0 turns direct handoff off). A key never takes more slots than its limit.
   */
  readonly handoffSliceMs?: number;
  /**
   * A job whose name no handler here knows: 'give-back' (default) yields it without counting the
   * attempt, to be offered again after unknownJobDelayMs holding no slot meanwhile (a worker of a
   * newer release, or of another service, may have the handler: a rolling deploy); 'fail' fails
   * the attempt like a throwing handler.
   */
  readonly unknownJobs?: UnknownJobs;
  /** How long a job given back waits before it is offered again (default 10 s; up to a fifth more, at random, so given-back jobs do not return in step). */
  readonly unknownJobDelayMs?: number;
  /**
   * A job given back for this long since its first give-back is dead, with reason "no worker knows
   * <name>": on the failed list (and in metrics), retryable once a worker knows it (default 1 h,
   * longer than a rolling deploy). Without a bound it was given back for ever.
   */
  readonly unknownJobDeadAfterMs?: number;
}

export const UNKNOWN_JOBS = ['give-back', 'fail'] as const;
export type UnknownJobs = (typeof UNKNOWN_JOBS)[number];

/** The share of unknownJobDelayMs added at random to each give-back. */
const GIVE_BACK_JITTER = 0.2;

interface Running {
  readonly stream: string;
  readonly jobId: string;
  readonly key: string | null;
  readonly leaseId: string;
  readonly leaseMs: number;
  readonly controller: AbortController;
  /** Why the handler was aborted: its lease was taken (the worker then says the handler stopped), or shutdown (it yields). */
  abortedFor?: 'lease' | 'shutdown';
  /** When the first job of this slot's run of direct handoffs started (this one's start if it came from the queue). */
  readonly sliceStartedAt: number;
  heartbeat: NodeJS.Timeout | undefined;
  /** Settles when the handler has returned (or thrown). */
  done: Promise<void>;
}

/** A job the ledger has just started for this worker, ready to run: what its row said (attempt and lease as started), and where it runs from. */
interface Admitted extends DispatchMessage {
  readonly sliceStartedAt: number;
}

type Finish =
  | { readonly kind: 'complete' }
  /** The handler stopped because its lease was taken: a revoked lease's slot passes on now, not when it lapses. */
  | { readonly kind: 'stopped' }
  | { readonly kind: 'fail'; readonly error: string }
  | { readonly kind: 'give-back'; readonly reason: string; readonly delayMs: number; readonly name: string };

/**
 * Runs admitted jobs from one dispatch queue: the key writer reads messages AND starts them in
 * one transaction (a stale or already started lease: archived there, run nothing) -> each
 * handler runs with an AbortSignal, its lease renewed every lease/3 -> Complete or Fail, whose
 * append also archives the message. Every one of these goes through the process's key writer, so
 * the starts, renewals and results of all handlers (and of every other writer of the process)
 * share transactions, each key's append with its own expected revision; the ledger, not the
 * queue, decides, so a duplicate delivery never runs a job twice and a reclaimed holder never
 * frees a slot. A Complete or Fail may start the job its release promotes in the same append
 * (direct handoff, handoffSliceMs): that job runs here with no message, its name and args coming
 * back with the commit. A lease taken away (revoked, expired) aborts its handler as soon as the
 * dispatcher announces it.
 */
export class Worker {
  readonly workerId: string;
  private readonly queueName: string;
  private readonly concurrency: number;
  private readonly handoffSliceMs: number;
  private readonly handlers: ReadonlyMap<string, JobHandler>;
  private readonly unknownJobs: UnknownJobs;
  private readonly unknownJobDelayMs: number;
  private readonly unknownJobDeadAfterMs: number;
  private readonly running = new Map<string, Running>();
  /** Slots kept for a job a completion in flight may hand off to this worker. */
  private reserved = 0;
  /** The last read filled every free slot: more may be waiting, so a freed slot reads again. */
  private moreWaiting = true;
  private readonly results = new Set<Promise<void>>();
  private loop: Promise<void> | undefined;
  /** Aborts a running handler as soon as its lease is taken away; on until stop() has finished. */
  private leaseWatch: { stop(): Promise<void> } | undefined;
  private stopping = false;
  /** When stop() was called (the ledger's clock): a result not recorded by then plus the grace period is given up. */
  private stoppedAt = 0;
  private readonly wakeup = new Wakeup();
  private readonly presence: Presence;

  constructor(
    private readonly deps: WorkerDeps,
    private readonly log: Logger,
    private readonly options: WorkerOptions,
  ) {
    this.workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    this.queueName = options.queue ?? WORKER_DEFAULTS.queue;
    this.concurrency = options.concurrency ?? WORKER_DEFAULTS.concurrency;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) throw new ValidationError('concurrency', 'must be an integer of 1 or more');
    const slice = options.handoffSliceMs ?? WORKER_DEFAULTS.handoffSliceMs;
    if (!Number.isFinite(slice) || slice < 0) throw new ValidationError('handoffSliceMs', 'must be a duration of 0 ms or more');
    this.handoffSliceMs = deps.directHandoff ? slice : 0;
    this.handlers = handlerTable(options.handlers);
    this.unknownJobs = options.unknownJobs ?? WORKER_DEFAULTS.unknownJobs;
    if (!UNKNOWN_JOBS.includes(this.unknownJobs)) throw new ValidationError('unknownJobs', `must be one of ${UNKNOWN_JOBS.join(', ')}`);
    this.unknownJobDelayMs = options.unknownJobDelayMs ?? WORKER_DEFAULTS.unknownJobDelayMs;
    // The jittered delay must still be one a Yield accepts.
    const maxDelayMs = Math.floor(MAX_YIELD_DELAY_MS / (1 + GIVE_BACK_JITTER));
    if (!Number.isSafeInteger(this.unknownJobDelayMs) || this.unknownJobDelayMs < 1 || this.unknownJobDelayMs > maxDelayMs) {
      throw new ValidationError('unknownJobDelayMs', `must be an integer number of milliseconds from 1 to ${maxDelayMs}`);
    }
    this.unknownJobDeadAfterMs = options.unknownJobDeadAfterMs ?? WORKER_DEFAULTS.unknownJobDeadAfterMs;
    if (!Number.isSafeInteger(this.unknownJobDeadAfterMs) || this.unknownJobDeadAfterMs < 1 || this.unknownJobDeadAfterMs > MAX_YIELD_DELAY_MS) {
      throw new ValidationError('unknownJobDeadAfterMs', `must be an integer number of milliseconds from 1 to ${MAX_YIELD_DELAY_MS}`);
    }
    const presenceIntervalMs = options.presenceIntervalMs ?? WORKER_DEFAULTS.presenceIntervalMs;
    if (!Number.isSafeInteger(presenceIntervalMs) || presenceIntervalMs < 10 || presenceIntervalMs > 2_147_483_647) {
      throw new ValidationError('presenceIntervalMs', 'must be an integer number of milliseconds from 10 to 2147483647');
    }
    this.presence = new Presence(deps.db, deps.outages, log, { id: this.workerId, queue: this.queueName, concurrency: this.concurrency, intervalMs: presenceIntervalMs }, () => this.running.size);
  }

  /** Number of handlers running now. */
  get active(): number {
    return this.running.size;
  }

  start(): void {
    if (this.loop) return;
    void this.presence.start();
    const listener = this.deps.queue.listen(this.queueName, () => {
      this.moreWaiting = true;
      this.wakeup.wake();
    });
    this.leaseWatch = this.deps.watchLostLeases((leaseId) => {
      const run = this.running.get(leaseId);
      if (run === undefined || run.controller.signal.aborted) return;
      this.log.warn({ jobId: run.jobId, leaseId }, 'lease revoked or expired: handler aborted');
      this.abort(run, `lease ${leaseId} was revoked or expired`, 'lease');
    });
    this.loop = this.readLoop().finally(() => listener.stop());
  }

  /**
   * Graceful shutdown: stop reading, let running handlers finish within the grace period, then
   * abort and yield the rest (their slots go back; no attempt is burned).
   */
  async stop(graceMs = this.options.graceMs ?? WORKER_DEFAULTS.graceMs): Promise<void> {
    this.stopping = true;
    this.stoppedAt = this.deps.clock();
    this.wakeup.wake();
    await this.loop;
    const deadline = new Promise<void>((resolve) => setTimeout(resolve, graceMs).unref());
    await Promise.race([Promise.all([...this.running.values()].map((r) => r.done)), deadline]);
    const left = [...this.running.values()];
    if (left.length > 0) {
      for (const run of left) this.abort(run, 'shutdown: yielded to another worker', 'shutdown');
      try {
        const results = await this.deps.writer.executeMany(left.map((run) => this.command(run, { type: 'Yield', jobId: run.jobId, leaseId: run.leaseId })));
        this.log.info({ yielded: left.length, refused: results.filter(E.isLeft).length }, 'yielded running jobs at shutdown');
      } catch (error) {
        // Not recorded: their leases lapse and the sweeper gives the jobs back (at least once).
        this.log.error({ err: error, jobIds: left.map((r) => r.jobId) }, 'yielding running jobs at shutdown failed');
      }
    }
    await this.settled();
    await this.leaseWatch?.stop();
    await this.presence.stop();
    this.deps.stopped?.(this);
  }

  /** Resolves when every result of a returned handler is recorded (an aborted handler still running records none). */
  private async settled(): Promise<void> {
    while (this.results.size > 0) await Promise.all(this.results);
  }

  private free(): number {
    return this.concurrency - this.running.size - this.reserved;
  }

  private async readLoop(): Promise<void> {
    const pollMs = this.options.pollIntervalMs ?? WORKER_DEFAULTS.pollIntervalMs;
    while (!this.stopping) {
      this.wakeup.reset();
      if (this.free() > 0) {
        let asked = 0;
        try {
          const { read, started } = await this.deps.writer.readAndStart({
            queue: this.queueName,
            workerId: this.workerId,
            // Asked when the flush starts: the slots free then, not now.
            qty: () => (asked = this.stopping ? 0 : Math.max(0, this.free())),
          });
          for (const s of started) this.run(admittedFrom(s));
          this.moreWaiting = asked > 0 && read >= asked;
          if (this.moreWaiting) continue;
        } catch (error) {
          // Nothing was started: the jobs claimed are claimable again (their row locks went with the transaction).
          if (!this.deps.outages.failed(error)) this.log.error({ err: error }, 'reading and starting jobs failed; retrying');
          await new Promise((resolve) => setTimeout(resolve, 1_000));
          continue;
        }
      }
      await this.wakeup.sleep(pollMs);
    }
  }

  private command(run: { readonly stream: string }, command: Command): KeyCommand {
    return { stream: run.stream, command, metadata: { workerId: this.workerId } };
  }

  private run(admitted: Admitted): void {
    const { stream, jobId, key, leaseId, name, args, attempt, leaseMs, sliceStartedAt } = admitted;
    const controller = new AbortController();
    const log = this.log.child({ jobId, key, leaseId, attempt });
    const run: Running = { stream, jobId, key, leaseId, leaseMs, controller, sliceStartedAt, heartbeat: undefined, done: Promise.resolve() };
    if (this.options.heartbeat !== false) {
      run.heartbeat = setInterval(() => this.renew(run, log), Math.max(100, Math.floor(leaseMs / 3)));
    }
    this.running.set(leaseId, run);
    run.done = this.execute(run, this.handlers.get(name), name, args, attempt, log);
  }

  /** Keeps `work` until it settles (stop() waits for it); it must not reject (record() does not). */
  private track(work: Promise<void>): void {
    this.results.add(work);
    void work.finally(() => this.results.delete(work));
  }

  /** Runs the handler, then has Complete or Fail recorded, unless the run was aborted (lease lost, or yielded at shutdown). */
  private async execute(run: Running, handler: JobHandler | undefined, name: string, args: unknown, attempt: number, log: Logger): Promise<void> {
    // Deferred a tick so `run` is registered when the handler's outcome is reported.
    await Promise.resolve();
    let finish: Finish;
    if (!handler && this.unknownJobs === 'give-back') {
      finish = this.giveBack(run, name, log);
    } else {
      try {
        if (!handler) throw new Error(`no handler for job name ${JSON.stringify(name)} in this worker (it knows: ${this.knownNames()})`);
        await handler(args, { jobId: run.jobId, key: run.key, attempt, leaseId: run.leaseId, signal: run.controller.signal, log });
        finish = { kind: 'complete' };
      } catch (error) {
        // PostgreSQL refuses NUL and lone surrogates: a Fail it refused would leave the job to its lease.
        finish = { kind: 'fail', error: escapeUnstorable(error instanceof Error ? error.message : String(error)) };
        if (!run.controller.signal.aborted) log.info({ err: error }, 'job failed');
      }
    }
    this.running.delete(run.leaseId);
    if (run.controller.signal.aborted) {
      clearInterval(run.heartbeat);
      this.freed();
      // Its lease was taken: say the handler stopped, so a revoked lease's slot passes on now (invariant 8).
      if (run.abortedFor === 'lease') this.track(this.record(run, { kind: 'stopped' }, false, log));
      return;
    }
    // A key's next job may come straight to this slot: keep the slot for it until the commit says.
    // A give-back hands nothing off: the yield's promotion goes through the queue, to whoever reads it.
    const handOff = finish.kind !== 'give-back' && !this.stopping && run.key !== null && this.deps.clock() - run.sliceStartedAt < this.handoffSliceMs;
    if (handOff) this.reserved++;
    else this.freed();
    this.track(this.record(run, finish, handOff, log));
  }

  /**
   * Records a handler's result, and keeps trying until it is recorded or refused: dropped, a
   * completed job would run again once its lease lapsed (after an outage, or while a stream it
   * releases cannot be read). The lease is renewed meanwhile (the heartbeat runs on), so only a
   * result that cannot be recorded for a whole lease can lose it. At shutdown it gives up after
   * the grace period; the lease then lapses and the job is offered again (at least once).
   */
  private async record(run: Running, finish: Finish, handOff: boolean, log: Logger): Promise<void> {
    const command = this.finishCommand(run, finish, handOff);
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          const result = (await this.deps.writer.executeMany([this.command(run, command)]))[0]!;
          if (E.isLeft(result)) {
            if (finish.kind === 'stopped') log.debug(`handler stopped; nothing to release: ${describeDomainError(result.left)}`);
            else log.warn(`result not recorded: ${describeDomainError(result.left)}`);
          } else for (const job of result.right.handedOff ?? []) this.runHandedOff(run, result.right.events, job);
          return;
        } catch (error) {
          if (this.stopping && this.deps.clock() > this.stoppedAt + (this.options.graceMs ?? WORKER_DEFAULTS.graceMs)) {
            log.error({ err: error, outcome: finish.kind }, 'recording the result failed at shutdown: given up (the lease lapses and the job is offered again)');
            return;
          }
          if (attempt === 1 && !this.deps.outages.failed(error)) log.error({ err: error, outcome: finish.kind }, 'recording the result failed; trying again until it is recorded');
          // Never more than a quarter lease apart: once what held the result back is gone (an outage, a
          // quarantine), the lease's grace is one lease long, and the result must land inside it (the
          // model checker, seed 100210: retried 1.6 s apart, the result of a 3 s lease came too late).
          await new Promise((resolve) => setTimeout(resolve, Math.min(5_000, run.leaseMs / 4, 100 * 2 ** Math.min(attempt, 6))));
        }
      }
    } finally {
      clearInterval(run.heartbeat);
      if (handOff) {
        this.reserved--;
        this.freed();
      }
    }
  }

  private finishCommand(run: Running, finish: Finish, handOff: boolean): Command {
    const to = handOff ? { handOffTo: { workerId: this.workerId, queue: this.queueName } } : {};
    switch (finish.kind) {
      case 'complete':
        return { type: 'Complete', jobId: run.jobId, leaseId: run.leaseId, ...to };
      case 'fail':
        return { type: 'Fail', jobId: run.jobId, leaseId: run.leaseId, error: finish.error, jitter: this.deps.random(), ...to };
      case 'give-back':
        return { type: 'Yield', jobId: run.jobId, leaseId: run.leaseId, delayMs: finish.delayMs, reason: finish.reason, deadAfterMs: this.unknownJobDeadAfterMs, name: finish.name };
      case 'stopped':
        return { type: 'Stopped', jobId: run.jobId, leaseId: run.leaseId, jitter: this.deps.random() };
    }
  }

  private knownNames(): string {
    return [...this.handlers.keys()].join(', ') || 'none';
  }

  /** A job this worker has no handler for: yielded (its attempt not counted), to be offered again after the delay. */
  private giveBack(run: Running, name: string, log: Logger): Finish {
    const delayMs = this.unknownJobDelayMs + Math.floor(this.unknownJobDelayMs * GIVE_BACK_JITTER * this.deps.random());
    const known = [...this.handlers.keys()];
    log.warn(
      { jobName: name, known, delayMs },
      `job ${run.jobId}: no handler for job name ${JSON.stringify(name)} in this worker (it knows: ${this.knownNames()}); given back, offered again in ${delayMs} ms`,
    );
    return { kind: 'give-back', reason: `no handler for ${name} in worker ${this.workerId}`, delayMs, name };
  }

  /** The job a completion started here by direct handoff: run it in the slot kept for it (at shutdown, give it back). */
  private runHandedOff(from: Running, events: readonly { readonly type: string; readonly data: unknown }[], job: HandedOffJob): void {
    const started = events.find((e) => e.type === 'JobStarted' && (e.data as { jobId: string }).jobId === job.jobId)?.data as
      | { leaseId: string; attempt: number; expiresAt: number; at: number }
      | undefined;
    if (started === undefined) return;
    const admitted: Admitted = {
      stream: from.stream,
      jobId: job.jobId,
      key: job.key,
      leaseId: started.leaseId,
      name: job.name,
      args: job.args,
      attempt: started.attempt,
      leaseMs: started.expiresAt - started.at,
      sliceStartedAt: from.sliceStartedAt,
    };
    if (this.stopping) {
      const yielded = this.deps.writer.executeMany([this.command(admitted, { type: 'Yield', jobId: admitted.jobId, leaseId: admitted.leaseId })]);
      // A failure here must not end the process mid-stop: the lease lapses and the job is offered again.
      this.track(yielded.then(() => undefined, (error: unknown) => this.log.error({ err: error, jobId: admitted.jobId }, 'yielding a handed-off job at shutdown failed')));
      return;
    }
    this.run(admitted);
  }

  /** A slot came free: read again if the queue may have more than the last read took. */
  private freed(): void {
    if (this.moreWaiting) this.wakeup.wake();
  }

  /** One renewal; the key writer puts every renewal due at once into one transaction. A refused renewal aborts its handler. */
  private renew(run: Running, log: Logger): void {
    if (run.controller.signal.aborted) return;
    this.deps.writer
      .executeMany([this.command(run, { type: 'Renew', jobId: run.jobId, leaseId: run.leaseId })])
      .then(([result]) => {
        if (E.isLeft(result!)) {
          log.warn(`lease lost, handler aborted: ${describeDomainError(result.left)}`);
          this.abort(run, describeDomainError(result.left), 'lease');
        }
      })
      .catch((error: unknown) => log.error({ err: error }, 'lease renewal failed'));
  }

  /** Aborts a run whose result will not be reported. */
  private abort(run: Running, why: string, abortedFor: 'lease' | 'shutdown'): void {
    clearInterval(run.heartbeat);
    run.abortedFor ??= abortedFor;
    run.controller.abort(new Error(why));
  }
}

const admittedFrom = (s: StartedJob): Admitted => ({
  stream: s.stream,
  jobId: s.message.jobId,
  key: s.message.key,
  leaseId: s.message.leaseId,
  name: s.message.name,
  args: s.message.args,
  attempt: s.started.attempt,
  leaseMs: s.started.expiresAt - s.started.at,
  sliceStartedAt: s.started.at,
});

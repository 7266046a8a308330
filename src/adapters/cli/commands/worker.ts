import { Option, type Command } from 'commander';
import ms from 'ms';
import { WORKER_DEFAULTS } from '../../worker/defaults.js';
import type { UnknownJobs, Worker } from '../../worker/worker.js';
import type { CommandContext } from '../context.js';
import { UsageError, asUsage } from '../errors.js';
import { duration, each, integer, queueCap, queueCaps } from '../parse.js';

// The help states the defaults the worker applies itself, from WORKER_DEFAULTS: a light module of
// its own, as registering the command must not load the worker (fp-ts, io-ts, the domain).

/** The longest --grace and --handoff-slice: a day. Past 2^31-1 ms (24.8 days) Node's timer for the grace fires at once. */
const MAX_WORKER_DURATION_MS = 24 * 3_600_000;

interface WorkerFlags {
  handlers: string;
  queue: string;
  concurrency?: number;
  grace?: number;
  sweeper?: boolean;
  heartbeat: boolean;
  handoffSlice?: number;
  unknownJobs?: UnknownJobs;
  unknownJobDelay?: number;
  unknownJobDeadAfter?: number;
  queueCap?: (readonly [string, number])[];
}

export const registerWorker = (program: Command, ctx: CommandContext): void => {
  program
    .command('worker')
    .description('run jobs from a dispatch queue until SIGTERM/SIGINT (graceful: running jobs finish or are yielded; a second signal exits at once)')
    .requiredOption('--handlers <path>', 'handlers module (ESM or CommonJS): export default { jobName: async (args, ctx) => { … } }')
    .option('--queue <queue>', 'dispatch queue to read', WORKER_DEFAULTS.queue)
    .option('--concurrency <n>', 'handlers running at once', integer('--concurrency'), WORKER_DEFAULTS.concurrency)
    .addOption(
      new Option('--grace <duration>', 'at shutdown, how long running handlers may finish before they are yielded')
        .argParser(duration('--grace', MAX_WORKER_DURATION_MS))
        .default(WORKER_DEFAULTS.graceMs, ms(WORKER_DEFAULTS.graceMs)),
    )
    .option('--queue-cap <queue=n>', 'a queue capped at n running jobs across every process (repeatable; default: JOBLEDGER_QUEUES, e.g. "builds=3,emails=10"); recorded as the limit of the key queue:<queue>', each(queueCap('--queue-cap')))
    .option('--sweeper', 'also run the sweeper (lease expiry, due jobs); one instance leads at a time')
    .option('--handoff-slice <duration>', `how long a handler slot keeps starting its key's next job directly before that goes through the queue (0: no direct handoff; default: ${ms(WORKER_DEFAULTS.handoffSliceMs)})`, duration('--handoff-slice', MAX_WORKER_DURATION_MS))
    .option('--unknown-jobs <what>', `a job whose name no handler here knows: give-back (its attempt not counted, offered again later) or fail (the attempt) (default: ${WORKER_DEFAULTS.unknownJobs})`)
    .option('--unknown-job-delay <duration>', `how long a job given back waits before it is offered again (default: ${ms(WORKER_DEFAULTS.unknownJobDelayMs)}, plus up to a fifth at random)`, duration('--unknown-job-delay'))
    .option('--unknown-job-dead-after <duration>', `a job given back this long since its first give-back (no worker knows its name) is dead, retryable once a worker knows it (default: ${ms(WORKER_DEFAULTS.unknownJobDeadAfterMs)})`, duration('--unknown-job-dead-after', MAX_WORKER_DURATION_MS))
    .option('--no-heartbeat', 'do not renew leases (for testing lease fencing: a lease then lapses under a live handler)')
    .action(async (flags: WorkerFlags) => {
      const [{ loadHandlers }, { UNKNOWN_JOBS }, { openDatabase }, { createLedger }, { QueueName, checkField }] = await Promise.all([
        import('../../worker/load-handlers.js'),
        import('../../worker/worker.js'),
        import('../database.js'),
        import('../../ledger.js'),
        import('../../../domain/values.js'),
      ]);
      // Every flag is checked before the database is opened: a worker may wait for it a long time,
      // and a worker started on a queue name it cannot read had announced itself and kept beating
      // on an open pool after its error (issue 21: a refused worker never exited).
      checkField('--queue', QueueName, flags.queue);
      if (flags.unknownJobs !== undefined && !UNKNOWN_JOBS.includes(flags.unknownJobs)) throw new UsageError(`--unknown-jobs: must be one of ${UNKNOWN_JOBS.join(', ')}`);
      const handlers = await loadHandlers(flags.handlers).catch(asUsage({ handlers: '--handlers' }));
      const queues = queueCaps(flags.queueCap);
      const db = await openDatabase((line) => ctx.logger.debug({ embedded: line }));
      try {
        const ledger = await createLedger({ databaseUrl: db.url, logger: ctx.logger, waitForDatabaseMs: Number.POSITIVE_INFINITY, ...(queues === undefined ? {} : { queues }) })
          .catch(asUsage({ queues: '--queue-cap' }))
          .catch((error: unknown) => {
            throw db.explain(error);
          });
        try {
          const options = {
            handlers,
            heartbeat: flags.heartbeat,
            queue: flags.queue,
            ...(flags.unknownJobs !== undefined ? { unknownJobs: flags.unknownJobs } : {}),
            ...(flags.concurrency !== undefined ? { concurrency: flags.concurrency } : {}),
            ...(flags.handoffSlice !== undefined ? { handoffSliceMs: flags.handoffSlice } : {}),
            ...(flags.unknownJobDelay !== undefined ? { unknownJobDelayMs: flags.unknownJobDelay } : {}),
            ...(flags.unknownJobDeadAfter !== undefined ? { unknownJobDeadAfterMs: flags.unknownJobDeadAfter } : {}),
          };
          let worker: Worker;
          try {
            worker = ledger.worker(options);
          } catch (error) {
            return await asUsage({ concurrency: '--concurrency', handoffSliceMs: '--handoff-slice', unknownJobDelayMs: '--unknown-job-delay', unknownJobDeadAfterMs: '--unknown-job-dead-after' })(error);
          }
          worker.start();
          if (flags.sweeper) ledger.start();
          ctx.note(`worker ${worker.workerId} reading queue ${flags.queue} (concurrency ${flags.concurrency})`);
          await new Promise<void>((resolve) => {
            let signals = 0;
            const onSignal = (signal: NodeJS.Signals) => {
              signals += 1;
              // A second signal exits at once: the ledger fences whatever was left running.
              if (signals > 1) process.exit(130);
              ctx.note(`${signal}: stopping (running jobs have ${flags.grace} ms to finish)`);
              resolve();
            };
            process.on('SIGTERM', onSignal);
            process.on('SIGINT', onSignal);
          });
          await worker.stop(flags.grace);
        } finally {
          // Also after an error: the ledger's pool, LISTEN connection and any worker it made must not outlive the command.
          await ledger.close();
        }
      } finally {
        await db.close();
      }
    });
};

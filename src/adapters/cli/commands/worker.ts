import { Option, type Command } from 'commander';
import { loadHandlers } from '../../worker/load-handlers.js';
import { UNKNOWN_JOBS, WORKER_DEFAULTS, type UnknownJobs } from '../../worker/worker.js';
import { asUsage } from '../errors.js';
import { openDatabase } from '../database.js';
import type { CommandContext } from '../context.js';
import { createLedger } from '../../ledger.js';
import { duration, each, integer, queueCap, queueCaps } from '../parse.js';

interface WorkerFlags {
  handlers: string;
  queue?: string;
  concurrency?: number;
  grace?: number;
  sweeper?: boolean;
  visibility?: number;
  heartbeat: boolean;
  handoffSlice?: number;
  unknownJobs: UnknownJobs;
  unknownJobDelay?: number;
  queueCap?: (readonly [string, number])[];
}

export const registerWorker = (program: Command, ctx: CommandContext): void => {
  program
    .command('worker')
    .description('run jobs from a dispatch queue until SIGTERM/SIGINT (graceful: running jobs finish or are yielded; a second signal exits at once)')
    .requiredOption('--handlers <path>', 'handlers module (ESM or CommonJS): export default { jobName: async (args, ctx) => { … } }')
    .option('--queue <queue>', 'dispatch queue to read', 'default')
    .option('--concurrency <n>', 'handlers running at once', integer('--concurrency'), 10)
    .option('--grace <duration>', 'at shutdown, how long running handlers may finish before they are yielded', duration('--grace'), 10_000)
    .option('--queue-cap <queue=n>', 'a queue capped at n running jobs across every process (repeatable; default: JOBLEDGER_QUEUES, e.g. "builds=3,emails=10"); recorded as the limit of the key queue:<queue>', each(queueCap('--queue-cap')))
    .option('--sweeper', 'also run the sweeper (lease expiry, due jobs); one instance leads at a time')
    .option('--visibility <duration>', 'how long a message read but not yet started stays invisible to other workers', duration('--visibility'))
    .option('--handoff-slice <duration>', "how long a handler slot keeps starting its key's next job directly before that goes through the queue (0: no direct handoff)", duration('--handoff-slice'))
    .addOption(
      new Option('--unknown-jobs <what>', 'a job whose name no handler here knows: give it back (its attempt not counted, offered again later) or fail the attempt')
        .choices(UNKNOWN_JOBS)
        .default(WORKER_DEFAULTS.unknownJobs),
    )
    .option('--unknown-job-delay <duration>', `how long a job given back waits before it is offered again (default ${WORKER_DEFAULTS.unknownJobDelayMs / 1000}s, plus up to a fifth at random)`, duration('--unknown-job-delay'))
    .option('--no-heartbeat', 'do not renew leases (for testing lease fencing: a lease then lapses under a live handler)')
    .action(async (flags: WorkerFlags) => {
      const handlers = await loadHandlers(flags.handlers);
      const db = await openDatabase((line) => ctx.logger.debug({ embedded: line }));
      const queues = queueCaps(flags.queueCap);
      const ledger = await createLedger({ databaseUrl: db.url, logger: ctx.logger, waitForDatabaseMs: Number.POSITIVE_INFINITY, ...(queues === undefined ? {} : { queues }) }).catch(asUsage({ queues: '--queue-cap' }));
      const options = {
        handlers,
        heartbeat: flags.heartbeat,
        unknownJobs: flags.unknownJobs,
        ...(flags.queue ? { queue: flags.queue } : {}),
        ...(flags.concurrency !== undefined ? { concurrency: flags.concurrency } : {}),
        ...(flags.visibility !== undefined ? { visibilityMs: flags.visibility } : {}),
        ...(flags.handoffSlice !== undefined ? { handoffSliceMs: flags.handoffSlice } : {}),
        ...(flags.unknownJobDelay !== undefined ? { unknownJobDelayMs: flags.unknownJobDelay } : {}),
      };
      let worker;
      try {
        worker = ledger.worker(options);
      } catch (error) {
        await ledger.close();
        await db.close();
        return asUsage({ concurrency: '--concurrency', handoffSliceMs: '--handoff-slice', unknownJobs: '--unknown-jobs', unknownJobDelayMs: '--unknown-job-delay' })(error);
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
      await ledger.close();
      await db.close();
    });
};

import { Option, type Command } from 'commander';
import type { EnqueueInput } from '../../../commands/enqueue.js';
import type { WhenFull } from '../../../domain/events.js';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { print } from '../output.js';
import { duration, each, integer, isoTime, json, limitKey, queueCap, queueCaps } from '../parse.js';

interface EnqueueFlags {
  args?: unknown;
  key?: string;
  limit?: number;
  lease?: number;
  priority?: number;
  runAt?: Date;
  delay?: number;
  maxAttempts?: number;
  queue?: string;
  jobId?: string;
  whenFull?: WhenFull;
  limitKey?: { key: string; limit?: number }[];
  queueCap?: (readonly [string, number])[];
  json?: boolean;
}

/** The API's field names as this command's flags, so an error names what the user typed. */
const FLAG_OF: Record<string, string> = {
  name: '<name>',
  args: '--args',
  key: '--key',
  limit: '--limit',
  leaseMs: '--lease',
  priority: '--priority',
  runAt: '--run-at',
  delayMs: '--delay',
  maxAttempts: '--max-attempts',
  queue: '--queue',
  jobId: '--job-id',
  whenFull: '--when-full',
  limits: '--limit-key',
  queues: '--queue-cap',
};

export const registerEnqueue = (program: Command, ctx: CommandContext): void => {
  program
    .command('enqueue')
    .description('enqueue a job; prints its id and whether it was admitted (acquired), parked, scheduled or rejected')
    .argument('<name>', 'job name (the handler that runs it)')
    .option('--args <json>', 'arguments as JSON', json('--args'))
    .option('--key <key>', 'concurrency key')
    .option('--limit <n>', "the key's limit: at most n jobs of the key run at once (default: the key's; 1 for a new key)", integer('--limit'))
    .option('--lease <duration>', "lease: how long a worker may stay silent, at least 1s; the key's first enqueue makes it the key's lease too (default: the key's; 30s for a new key)", duration('--lease'))
    .option('--priority <p>', 'smaller runs first (default: 0)', integer('--priority'))
    .option('--run-at <iso>', 'run at this time', isoTime('--run-at'))
    .option('--delay <duration>', 'run after this delay', duration('--delay'))
    .option('--max-attempts <n>', 'starts before the job is dead (default: 5)', integer('--max-attempts'))
    .option('--queue <queue>', 'dispatch queue (default: "default")')
    .option('--job-id <id>', 'job id; enqueuing an id again records nothing (default: a random UUID)')
    .addOption(new Option('--when-full <policy>', 'when the key is full or paused: park, reject (recorded, never runs) or replace (the parked jobs of this name) (default: park)').choices(['park', 'reject', 'replace']))
    .option('--limit-key <key[=n]>', 'a further limit key the job is under (repeatable): it runs only with a slot in its key and in each of these; =n sets the limit at the key\'s first use (default: 1)', each(limitKey('--limit-key')))
    .option('--queue-cap <queue=n>', 'a queue capped at n running jobs across every process (repeatable; default: JOBLEDGER_QUEUES, e.g. "builds=3,emails=10")', each(queueCap('--queue-cap')))
    .option('--json', 'machine-readable output')
    .action(async (name: string, flags: EnqueueFlags) => {
      const input: EnqueueInput = {
        name,
        ...(flags.args !== undefined ? { args: flags.args } : {}),
        ...(flags.key !== undefined ? { key: flags.key } : {}),
        ...(flags.limit !== undefined ? { limit: flags.limit } : {}),
        ...(flags.lease !== undefined ? { leaseMs: flags.lease } : {}),
        ...(flags.priority !== undefined ? { priority: flags.priority } : {}),
        ...(flags.runAt !== undefined ? { runAt: flags.runAt } : {}),
        ...(flags.delay !== undefined ? { delayMs: flags.delay } : {}),
        ...(flags.maxAttempts !== undefined ? { maxAttempts: flags.maxAttempts } : {}),
        ...(flags.queue !== undefined ? { queue: flags.queue } : {}),
        ...(flags.jobId !== undefined ? { jobId: flags.jobId } : {}),
        ...(flags.whenFull !== undefined ? { whenFull: flags.whenFull } : {}),
        ...(flags.limitKey !== undefined ? { limits: flags.limitKey } : {}),
      };
      const queues = queueCaps(flags.queueCap);
      const result = await withLedger(
        ctx,
        (ledger) => ledger.enqueue(input, { by: process.env.USER ?? 'cli', via: 'cli' }),
        queues === undefined ? {} : { queues },
      ).catch(asUsage(FLAG_OF));
      print({ json: flags.json === true }, { jobId: result.jobId, status: result.status }, () => `${result.jobId} ${result.status}`);
    });
};

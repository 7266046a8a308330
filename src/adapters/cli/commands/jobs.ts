import type { Command } from 'commander';
import type { JobStatusFilter } from '../../postgres/queries/list-jobs.js';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { print, table, time } from '../output.js';
import { integer } from '../parse.js';

const FLAG_OF = { key: '--key', name: '--name', queue: '--queue', status: '--status', limit: '--limit', cursor: '--cursor' };

export const registerJobs = (program: Command, ctx: CommandContext): void => {
  program
    .command('jobs')
    .description('jobs, newest first')
    .option('--key <key>', 'only jobs of this concurrency key')
    .option('--name <name>', 'only jobs of this name')
    .option('--queue <queue>', 'only jobs of this dispatch queue')
    .option('--status <status>', 'only jobs in this status: scheduled, parked, holding, running, completed, dead, cancelled, discarded, or failed (waiting for a retry after a failed attempt)')
    .option('--limit <n>', 'at most n jobs, 1-1000 (default: 50)', integer('--limit'))
    .option('--cursor <cursor>', 'the page after the one that printed this cursor')
    .option('--json', 'machine-readable output')
    .action(async (flags: { key?: string; name?: string; queue?: string; status?: string; limit?: number; cursor?: string; json?: boolean }) => {
      // The ledger checks the values (status, limit range, cursor) and names the field at fault.
      const filter = {
        ...(flags.key !== undefined ? { key: flags.key } : {}),
        ...(flags.name !== undefined ? { name: flags.name } : {}),
        ...(flags.queue !== undefined ? { queue: flags.queue } : {}),
        ...(flags.status !== undefined ? { status: flags.status as JobStatusFilter } : {}),
        ...(flags.limit !== undefined ? { limit: flags.limit } : {}),
        ...(flags.cursor !== undefined ? { cursor: flags.cursor } : {}),
      };
      const page = await withLedger(ctx, (ledger) => ledger.jobs(filter).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, page, () =>
        [
          page.jobs.length === 0
            ? 'no jobs'
            : table(
                ['job', 'key', 'name', 'status', 'attempts', 'priority', 'enqueued', 'finished', 'worker', 'error / reason'],
                page.jobs.map((j) => [j.jobId, j.key, j.name, j.status, `${j.attempts}/${j.maxAttempts}`, j.priority, time(j.enqueuedAt), time(j.finishedAt), j.workerId, j.finishReason ?? j.lastError]),
              ),
          page.nextCursor === null ? '' : `more: --cursor ${page.nextCursor}`,
        ]
          .filter(Boolean)
          .join('\n'),
      );
    });
};

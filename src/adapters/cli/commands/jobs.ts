import type { Command } from 'commander';
import type { JobStatus } from '../../postgres/queries/list-jobs.js';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { print, table, time } from '../output.js';
import { integer } from '../parse.js';

const FLAG_OF = { key: '--key', status: '--status', limit: '--limit', cursor: '--cursor' };

export const registerJobs = (program: Command, ctx: CommandContext): void => {
  program
    .command('jobs')
    .description('jobs, newest first')
    .option('--key <key>', 'only jobs of this concurrency key')
    .option('--status <status>', 'only jobs in this status: scheduled, parked, holding, running, completed, dead, cancelled, discarded')
    .option('--limit <n>', 'at most n jobs, 1-1000 (default: 50)', integer('--limit'))
    .option('--cursor <cursor>', 'the page after the one that printed this cursor')
    .option('--json', 'machine-readable output')
    .action(async (flags: { key?: string; status?: string; limit?: number; cursor?: string; json?: boolean }) => {
      // The ledger checks the values (status, limit range, cursor) and names the field at fault.
      const filter = {
        ...(flags.key !== undefined ? { key: flags.key } : {}),
        ...(flags.status !== undefined ? { status: flags.status as JobStatus } : {}),
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

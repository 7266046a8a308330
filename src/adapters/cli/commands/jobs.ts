import { Option, type Command } from 'commander';
import { JOB_STATUS_FILTERS } from '../../postgres/queries/job-statuses.js';
import type { JobRow, JobStatusFilter } from '../../postgres/queries/list-jobs.js';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { print, shortened, table, time } from '../output.js';
import { integer } from '../parse.js';

const FLAG_OF = { key: '--key', name: '--name', queue: '--queue', status: '--status', limit: '--limit', cursor: '--cursor' };

/** The widest an error or reason is in the table: a stack trace or a long message must not push the row across the screen (--json has it whole). */
export const ERROR_WIDTH = 60;

/**
 * A dead job's or a failed one's error (status dead, or scheduled after a used attempt): the
 * reason of a dead job only says its attempts ran out, which the attempts column shows. Any other
 * job: how it finished (cancelled by, discarded by), else its last error.
 */
const errorOrReason = (j: JobRow): string | null =>
  shortened(j.status === 'dead' || (j.status === 'scheduled' && j.attempts > 0) ? (j.lastError ?? j.finishReason) : (j.finishReason ?? j.lastError), ERROR_WIDTH);

export const registerJobs = (program: Command, ctx: CommandContext): void => {
  program
    .command('jobs')
    .description('jobs, newest first')
    .option('--key <key>', 'only jobs of this concurrency key')
    .option('--name <name>', 'only jobs of this name')
    .option('--queue <queue>', 'only jobs of this dispatch queue')
    .addOption(new Option('--status <status>', 'only jobs in this status (failed: waiting for a retry after a failed attempt)').choices(JOB_STATUS_FILTERS))
    .option('--limit <n>', 'at most n jobs, 1-1000 (default: 50)', integer('--limit'))
    .option('--cursor <cursor>', 'the page after the one that printed this cursor')
    .option('--json', 'machine-readable output')
    .action(async (flags: { key?: string; name?: string; queue?: string; status?: JobStatusFilter; limit?: number; cursor?: string; json?: boolean }) => {
      // The ledger checks the other values (limit range, cursor) and names the field at fault.
      const filter = {
        ...(flags.key !== undefined ? { key: flags.key } : {}),
        ...(flags.name !== undefined ? { name: flags.name } : {}),
        ...(flags.queue !== undefined ? { queue: flags.queue } : {}),
        ...(flags.status !== undefined ? { status: flags.status } : {}),
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
                page.jobs.map((j) => [j.jobId, j.key, j.name, j.status, `${j.attempts}/${j.maxAttempts}`, j.priority, time(j.enqueuedAt), time(j.finishedAt), j.workerId, errorOrReason(j)]),
              ),
          page.nextCursor === null ? '' : `more: --cursor ${page.nextCursor}`,
        ]
          .filter(Boolean)
          .join('\n'),
      );
    });
};

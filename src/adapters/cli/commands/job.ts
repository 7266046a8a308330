import type { Command } from 'commander';
import { withLedgerToRead, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { print, table, time } from '../output.js';

const FLAG_OF = { jobId: '--job' };

export const registerJob = (program: Command, ctx: CommandContext): void => {
  program
    .command('job')
    .description("a job's own view: its events on its key and on each limit key it is under, in the ledger's order, with who and why")
    .requiredOption('--job <id>', 'the job')
    .option('--renewals', 'every lease renewal on a line of its own (default: each run of renewals of one lease in one line)')
    .option('--json', 'machine-readable output')
    .action(async (flags: { job: string; renewals?: boolean; json?: boolean }) => {
      const history = await withLedgerToRead(ctx, (ledger) => ledger.jobHistory({ jobId: flags.job, renewals: flags.renewals === true ? 'all' : 'folded' }).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, history, () =>
        [
          `job ${history.jobId} (key ${history.key}): ${history.events.reduce((n, e) => n + (e.renewals?.count ?? 1), 0)} events` +
            (history.events.some((e) => e.renewals !== undefined) ? ' (each run of renewals in one line; --renewals shows each)' : ''),
          table(
            ['at', 'stream', 'event', 'who', 'via'],
            history.events.map((e) => [time(e.at), `${e.stream} @${e.revision}`, e.inWords, e.by ?? e.workerId, e.via]),
          ),
        ].join('\n'),
      );
    });
};

import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';

const FLAG_OF = { jobId: '--job', by: '--by' };

export const registerCancel = (program: Command, ctx: CommandContext): void => {
  withBy(
    program
      .command('cancel')
      .description('cancel a scheduled, parked or running job; a holder\'s slot goes to the next parked job (a running job\'s once its handler stopped, or its lease lapsed)')
      .requiredOption('--job <id>', 'the job'),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: ByFlag & { job: string; json?: boolean }) => {
      const result = await withLedger(ctx, (ledger) => ledger.cancel({ jobId: flags.job, by: flags.by }, CLI_METADATA).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, { jobId: flags.job, ...result }, () =>
        !result.cancelled
          ? `job ${flags.job} had already finished; nothing changed`
          : result.stopping
            ? `cancelled job ${flags.job} (by ${flags.by}); it is running: its handler is told to stop, and its slot passes on when it has (or when its lease lapses)`
            : `cancelled job ${flags.job} (by ${flags.by})`,
      );
    });
};

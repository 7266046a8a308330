import type { Command } from 'commander';
import type { Ledger } from '../../ledger.js';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';
import { PASSES_ON, standingOf, unchanged } from './unchanged.js';

const FLAG_OF = { jobId: '--job', by: '--by' };

/**
 * Who asked first, when a running job's cancel changed nothing: its lease was revoked as a cancel
 * before `since` (the decider keeps the first cancel), so this one wrote no event.
 */
const cancelledBefore = async (ledger: Ledger, jobId: string, since: number): Promise<string | null> => {
  const revoked = (await ledger.jobHistory({ jobId })).events.findLast((e) => e.type === 'LeaseRevoked' && (e.data as { cancel?: boolean }).cancel === true);
  return revoked !== undefined && revoked.at < since ? (revoked.by ?? 'someone') : null;
};

export const registerCancel = (program: Command, ctx: CommandContext): void => {
  withBy(
    program
      .command('cancel')
      .description('cancel a scheduled, parked or running job; a holder\'s slot goes to the next parked job (a running job\'s once its handler stopped, or its lease lapsed); a finished job, or a running one already being cancelled, is left as it is (exit 2)')
      .requiredOption('--job <id>', 'the job'),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: ByFlag & { job: string; json?: boolean }) => {
      const result = await withLedger(ctx, async (ledger) => {
        const since = ledger.now();
        const cancelled = await ledger.cancel({ jobId: flags.job, by: flags.by }, CLI_METADATA).catch(asUsage(FLAG_OF));
        if (!cancelled.cancelled) unchanged(`job ${flags.job} is ${await standingOf(ledger, flags.job)}, not scheduled, parked or running`, 'only such a job is cancelled');
        const first = cancelled.stopping ? await cancelledBefore(ledger, flags.job, since) : null;
        if (first !== null) unchanged(`job ${flags.job} is running and already being cancelled (by ${first})`, PASSES_ON);
        return cancelled;
      });
      print({ json: flags.json === true }, { jobId: flags.job, ...result }, () =>
        result.stopping ? `cancelled job ${flags.job} (by ${flags.by}); it is running: ${PASSES_ON}` : `cancelled job ${flags.job} (by ${flags.by})`,
      );
    });
};

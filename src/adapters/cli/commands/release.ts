import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';

const FLAG_OF = { key: '--key', jobId: '--job', by: '--by' };

export const registerRelease = (program: Command, ctx: CommandContext): void => {
  withBy(
    program
      .command('release')
      .description("revoke a holder's lease (or every holder's): a running job's handler is told to stop and its slot goes to the next parked job once it has (or its lease lapses), then it is retried later; a holder that never started lets its slot go at once and waits in line again")
      .requiredOption('--key <key>', 'the concurrency key')
      .option('--job <id>', 'only this holder')
      .option('--force', "free a running holder's slot now instead of once its handler stopped: only when no handler runs (its worker is gone); recorded as forced"),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: ByFlag & { key: string; job?: string; force?: boolean; json?: boolean }) => {
      const input = { key: flags.key, by: flags.by, ...(flags.job !== undefined ? { jobId: flags.job } : {}), ...(flags.force === true ? { force: true } : {}) };
      const result = await withLedger(ctx, (ledger) => ledger.release(input, CLI_METADATA).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, result, () =>
        result.released.length === 0
          ? `key ${flags.key}: no slot was held; nothing changed`
          : result.released
              .map((jobId) => `revoked the lease of job ${jobId} on key ${flags.key} (by ${flags.by})${result.stopping.includes(jobId) ? '; it is running: its handler is told to stop, and its slot passes on when it has (or when its lease lapses)' : ''}`)
              .join('\n'),
      );
    });
};

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
      .description("revoke a holder's lease (or every holder's): its slot goes to the next parked job; a started job is retried later, one that never started waits in line again")
      .requiredOption('--key <key>', 'the concurrency key')
      .option('--job <id>', 'only this holder'),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: ByFlag & { key: string; job?: string; json?: boolean }) => {
      const input = { key: flags.key, by: flags.by, ...(flags.job !== undefined ? { jobId: flags.job } : {}) };
      const result = await withLedger(ctx, (ledger) => ledger.release(input, CLI_METADATA).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, result, () =>
        result.released.length === 0
          ? `key ${flags.key}: no slot was held; nothing changed`
          : result.released.map((jobId) => `revoked the lease of job ${jobId} on key ${flags.key} (by ${flags.by})`).join('\n'),
      );
    });
};

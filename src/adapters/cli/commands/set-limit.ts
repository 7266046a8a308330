import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';
import { integer } from '../parse.js';

const FLAG_OF = { key: '--key', limit: '--limit', by: '--by' };

export const registerSetLimit = (program: Command, ctx: CommandContext): void => {
  withBy(
    program
      .command('set-limit')
      .description("change a key's limit: a raise promotes parked jobs at once; a lowered limit preempts no one (holders above it finish)")
      .requiredOption('--key <key>', 'the concurrency key')
      .requiredOption('--limit <n>', 'at most n jobs of the key run at once', integer('--limit')),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: ByFlag & { key: string; limit: number; json?: boolean }) => {
      const result = await withLedger(ctx, (ledger) => ledger.setLimit({ key: flags.key, limit: flags.limit, by: flags.by }, CLI_METADATA).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, result, () =>
        [`key ${flags.key}: limit ${result.limit} (by ${flags.by})`, ...result.promoted.map((jobId) => `promoted parked job ${jobId}`)].join('\n'),
      );
    });
};

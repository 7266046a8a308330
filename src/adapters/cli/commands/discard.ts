import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';

const FLAG_OF = { key: '--key', jobIds: '--job', by: '--by' };

const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value];

export const registerDiscard = (program: Command, ctx: CommandContext): void => {
  withBy(
    program
      .command('discard')
      .description('drop parked jobs of a key (parked jobs never expire on their own): the named ones, or all of them')
      .requiredOption('--key <key>', 'the concurrency key')
      .option('--job <id>', 'only this parked job (repeat for several)', collect),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: ByFlag & { key: string; job?: string[]; json?: boolean }) => {
      const input = { key: flags.key, by: flags.by, ...(flags.job !== undefined ? { jobIds: flags.job } : {}) };
      const result = await withLedger(ctx, (ledger) => ledger.discard(input, CLI_METADATA).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, result, () =>
        result.discarded.length === 0
          ? `key ${flags.key}: no job was parked; nothing changed`
          : result.discarded.map((jobId) => `discarded parked job ${jobId} on key ${flags.key} (by ${flags.by})`).join('\n'),
      );
    });
};

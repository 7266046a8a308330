import type { Command } from 'commander';
import ms from 'ms';
import { withLedger, type CommandContext } from '../context.js';
import { print, table, time } from '../output.js';

export const registerKeys = (program: Command, ctx: CommandContext): void => {
  program
    .command('keys')
    .description('every concurrency key: limit, slots in use, parked and scheduled jobs, oldest wait, lease state (live / expired / none)')
    .option('--json', 'machine-readable output')
    .action(async (flags: { json?: boolean }) => {
      const keys = await withLedger(ctx, (ledger) => ledger.keys());
      const now = Date.now();
      print({ json: flags.json === true }, keys, () =>
        keys.length === 0
          ? 'no keys yet'
          : table(
              ['key', 'limit', 'in use', 'parked', 'scheduled', 'oldest wait', 'lease', 'next expiry'],
              keys.map((k) => [
                k.key,
                k.limit,
                `${k.inUse}${k.atLimit ? ' (full)' : ''}`,
                k.parked,
                k.scheduled,
                k.oldestParkedAt === null ? '' : ms(Math.max(0, now - k.oldestParkedAt)),
                k.leaseState,
                time(k.nextLeaseExpiry),
              ]),
            ),
      );
    });
};

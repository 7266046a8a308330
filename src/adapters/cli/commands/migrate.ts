import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { print } from '../output.js';

export const registerMigrate = (program: Command, ctx: CommandContext): void => {
  program
    .command('migrate')
    .description('create or upgrade the schema (idempotent; safe with several processes at once)')
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean }) => {
      // Opening the ledger applies the pending migrations.
      await withLedger(ctx, async () => undefined);
      const { migrations } = await import('../../postgres/migrations.js');
      const latest = migrations[migrations.length - 1]!;
      print({ json: opts.json === true }, { schemaVersion: latest.version }, () => `schema is at version ${latest.version} (${latest.name})`);
    });
};

import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { UsageError } from '../errors.js';
import { print } from '../output.js';

export const registerMigrate = (program: Command, ctx: CommandContext): void => {
  program
    .command('migrate')
    .description('create or upgrade the schema (idempotent; safe with several processes at once)')
    .option('--distributed', 'distribute the schema by key on Citus (the default wherever the citus extension is installed); refused on a database without it')
    .option('--json', 'machine-readable output')
    .action(async (opts: { json?: boolean; distributed?: boolean }) => {
      // Opening the ledger applies the pending migrations (and distributes the schema on Citus).
      await withLedger(ctx, async () => undefined, opts.distributed === true ? { distributed: true } : {}).catch((error: unknown) => {
        throw (error as Error).name === 'NotCitusError' ? new UsageError(`--distributed: ${(error as Error).message}`) : error;
      });
      const { migrations } = await import('../../postgres/migrations.js');
      const latest = migrations[migrations.length - 1]!;
      print({ json: opts.json === true }, { schemaVersion: latest.version }, () => `schema is at version ${latest.version} (${latest.name})`);
    });
};

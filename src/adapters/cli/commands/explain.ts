import type { Command } from 'commander';
import { explanationInWords } from '../../../domain/explain-words.js';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { print } from '../output.js';
import { isoTime } from '../parse.js';

const FLAG_OF = { jobId: '--job', at: '--at' };

export const registerExplain = (program: Command, ctx: CommandContext): void => {
  program
    .command('explain')
    .description("why a job is where it is, from the ledger: its place in line, the holders ahead of it and their leases, the limits it waits on, a pause, a schedule; for a finished job, how it ended and how long it waited for what")
    .requiredOption('--job <id>', 'the job')
    .option('--at <iso>', 'as it was at this time', isoTime('--at'))
    .option('--json', 'machine-readable output')
    .action(async (flags: { job: string; at?: Date; json?: boolean }) => {
      // One connection: the explanation's reads run at once, and a second connection's setup costs more than waiting for the first.
      const explanation = await withLedger(ctx, (ledger) => ledger.explain({ jobId: flags.job, ...(flags.at ? { at: flags.at.getTime() } : {}) }).catch(asUsage(FLAG_OF)), { poolSize: 1 });
      print({ json: flags.json === true }, explanation, () => explanationInWords(explanation));
    });
};

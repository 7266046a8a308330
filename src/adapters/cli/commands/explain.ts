import type { Command } from 'commander';
import { explanationInWords } from '../../../domain/explain-words.js';
import { withLedgerToRead, type CommandContext } from '../context.js';
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
      const explanation = await withLedgerToRead(ctx, (ledger) => ledger.explain({ jobId: flags.job, ...(flags.at ? { at: flags.at.getTime() } : {}) }).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, explanation, () => explanationInWords(explanation));
    });
};

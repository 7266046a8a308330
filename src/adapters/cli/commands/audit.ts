import type { Command } from 'commander';
import ms from 'ms';
import type { Handoff } from '../../../domain/audit.js';
import { withLedger, type CommandContext } from '../context.js';
import { UsageError, asUsage } from '../errors.js';
import { print, table, time } from '../output.js';

const FLAG_OF = { key: '--key', jobId: '--job' };

const how = (h: Handoff): string => (h.how === 'promoted' ? `promoted after ${ms(h.parkedMs ?? 0)} parked` : 'acquired');

const why = (h: Handoff): string => {
  if (h.reason === null) return 'held';
  if (h.by !== null) return `${h.reason} by ${h.by}`;
  if (h.error !== null) return `${h.reason}: ${h.error}`;
  return h.reason;
};

export const registerAudit = (program: Command, ctx: CommandContext): void => {
  program
    .command('audit')
    .description("every slot handoff of a key (or of one job), read from the ledger: who held the slot, how they got it, when and why it was let go")
    .option('--key <key>', 'the concurrency key')
    .option('--job <id>', 'one job')
    .option('--json', 'machine-readable output, with the events')
    .action(async (flags: { key?: string; job?: string; json?: boolean }) => {
      if ((flags.key === undefined) === (flags.job === undefined)) throw new UsageError('--key: give --key K or --job ID (one of them)');
      const target = flags.key !== undefined ? { key: flags.key } : { jobId: flags.job! };
      const audit = await withLedger(ctx, (ledger) => ledger.audit(target).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, audit, () =>
        audit.handoffs.length === 0
          ? 'no slot handoffs yet'
          : table(
              ['job', 'lease', 'how', 'acquired', 'worker', 'attempt', 'released', 'why'],
              audit.handoffs.map((h) => [h.jobId, h.leaseId, how(h), time(h.acquiredAt), h.workerId, h.attempt, time(h.releasedAt), why(h)]),
            ),
      );
    });
};

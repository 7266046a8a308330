import type { Command } from 'commander';
import ms from 'ms';
import type { Audit, AuditPage } from '../../../commands/audit.js';
import { AUDIT_PAGE, MAX_AUDIT_PAGE } from '../../../commands/audit-page.js';
import { jobName, type Handoff } from '../../../domain/audit.js';
import { withLedgerToRead, type CommandContext } from '../context.js';
import { UsageError, asUsage } from '../errors.js';
import { print, table, time } from '../output.js';
import { integer } from '../parse.js';

const FLAG_OF = { key: '--key', jobId: '--job', before: '--before', limit: '--limit' };

const how = (h: Handoff): string => (h.how === 'promoted' ? `promoted after ${ms(h.parkedMs ?? 0)} parked` : 'acquired');

const why = (h: Handoff): string => {
  if (h.reason === null) return 'held';
  if (h.by !== null) return `${h.reason} by ${h.by}`;
  if (h.error !== null) return `${h.reason}: ${h.error}`;
  return h.reason;
};

/** The other limits the job held a slot in under the same lease (a guest's list names this key too). */
const alsoHeld = (h: Handoff): string => (h.limits ?? []).filter((k) => k !== h.key).join(', ');

export const registerAudit = (program: Command, ctx: CommandContext): void => {
  program
    .command('audit')
    .description(
      "every slot handoff of a key (or of one job), read from the ledger: who held the slot, how they got it, when and why it was let go; on a limit key, the jobs of other keys under its limit too",
    )
    .option('--key <key>', 'the concurrency key')
    .option('--job <id>', 'one job')
    .option('--before <revision>', "a key's older page: the events before this revision (the last page's `older`)", integer('--before'))
    .option('--limit <n>', `events of a key's page (default ${AUDIT_PAGE}, at most ${MAX_AUDIT_PAGE})`, integer('--limit'))
    .option('--events', 'and every event behind them, in words')
    .option('--json', 'machine-readable output, with the events')
    .action(async (flags: { key?: string; job?: string; before?: number; limit?: number; events?: boolean; json?: boolean }) => {
      if ((flags.key === undefined) === (flags.job === undefined)) throw new UsageError('--key: give --key K or --job ID (one of them)');
      if (flags.job !== undefined && (flags.before !== undefined || flags.limit !== undefined)) throw new UsageError(`${flags.before !== undefined ? '--before' : '--limit'}: pages a key's audit (--key); a job's is whole`);
      const page = { ...(flags.before === undefined ? {} : { before: flags.before }), ...(flags.limit === undefined ? {} : { limit: flags.limit }) };
      const target = flags.key !== undefined ? { key: flags.key, ...page } : { jobId: flags.job! };
      const audit = await withLedgerToRead(ctx, (ledger) => ledger.audit(target).catch(asUsage(FLAG_OF)));
      print({ json: flags.json === true }, audit, () => {
        const { handoffs } = audit;
        const underLimits = handoffs.some((h) => alsoHeld(h) !== '');
        const homes = [...new Set(handoffs.flatMap((h) => (h.home === undefined ? [] : [h.home])))];
        return [
          handoffs.length === 0
            ? 'no slot handoffs yet'
            : table(
                ['job', 'lease', 'how', 'acquired', 'worker', 'attempt', 'released', 'why', ...(underLimits ? ['also held'] : [])],
                handoffs.map((h) => [jobName(h.jobId, h.home), h.leaseId, how(h), time(h.acquiredAt), h.workerId, h.attempt, time(h.releasedAt), why(h), ...(underLimits ? [alsoHeld(h)] : [])]),
              ),
          // A guest's start and the who or what of its release are recorded on its own key only.
          homes.length === 0 ? '' : `jobs of other keys held these slots as a further limit: their workers, attempts and who or what let them go are in their own keys' audits (${homes.map((k) => `jobledger audit --key ${k}`).join(', ')})`,
          flags.events === true ? eventLines(audit) : '',
          audit.page === undefined ? '' : pageLine(flags.key!, audit.page),
        ]
          .filter(Boolean)
          .join('\n');
      });
    });
};

/** Where the page sits, and how to read the one before it. */
const pageLine = (key: string, page: AuditPage): string =>
  `events ${page.from}–${page.to} of ${page.head + 1}` + (page.older === null ? '' : `; older: jobledger audit --key ${key} --before ${page.older}`);

const eventLines = (audit: Audit): string =>
  table(['revision', 'at', 'event'], audit.events.map((e, i) => [e.revision, time((e.data as { at?: number }).at), audit.eventsInWords[i]]));

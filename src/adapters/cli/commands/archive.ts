import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { UsageError } from '../errors.js';
import { print } from '../output.js';
import { duration } from '../parse.js';

/** `--before`: an ISO-8601 time, or a duration meaning that long ago ("30d"). */
const cutOf = (value: string, now: number): number => {
  const at = /^\d+(\.\d+)?\s*[a-z]*$/i.test(value.trim()) ? now - duration('--before')(value) : Date.parse(value);
  if (Number.isNaN(at)) throw new UsageError(`--before: "${value}" is neither an ISO-8601 time (2026-11-01T00:00:00Z) nor a duration ago (30d)`);
  // A duration ago past the start of time is no time at all (issue 21: it failed, exit 1, at toISOString).
  if (Number.isNaN(new Date(at).getTime())) throw new UsageError(`--before: "${value}" ago is before the earliest time there is`);
  if (at > now) throw new UsageError(`--before: ${new Date(at).toISOString()} is in the future; only jobs already finished can be archived`);
  return at;
};

const megabytes = (bytes: number): string => `${(bytes / 1_048_576).toFixed(1)} MB`;

export const registerArchive = (program: Command, ctx: CommandContext): void => {
  program
    .command('archive')
    .description(
      'move the events of jobs that finished before a time out of the live ledger into its archive (events_archive): ' +
        'whole weeks (Monday to Monday, UTC) that ended by then, or with --exact every such event; ' +
        "keys' states, state --at, audit and replay --verify read both and answer as before",
    )
    .requiredOption('--before <time>', 'jobs finished before this: an ISO-8601 time, or a duration ago (30d, 12h)')
    .option('--exact', 'also move, row by row, the events of the weeks that end after --before (slower: each row is deleted and inserted)')
    .option('--dry-run', 'count what would move; move nothing')
    .option('--json', 'machine-readable output')
    .action(async (flags: { before: string; exact?: boolean; dryRun?: boolean; json?: boolean }) => {
      const before = cutOf(flags.before, Date.now());
      const result = await withLedger(ctx, (ledger) => ledger.archive({ before, exact: flags.exact === true, dryRun: flags.dryRun === true })).catch((error: unknown) => {
        throw (error as Error).name === 'ArchiveDistributedError' ? new UsageError((error as Error).message) : error;
      });
      const dry = flags.dryRun === true;
      print({ json: flags.json === true }, { before: new Date(before).toISOString(), dryRun: dry, exact: flags.exact === true, ...result }, () => {
        const weeks = result.weeks.length === 0 ? 'no whole week' : `${result.weeks.length} whole week${result.weeks.length === 1 ? '' : 's'} (before Monday ${result.weeksBefore}, UTC)`;
        const movedOn = result.movedOn === 0 ? '' : `; ${result.movedOn} rows of unfinished jobs ${dry ? 'would move' : 'moved'} on to the first week left live`;
        return (
          `${dry ? 'would move' : 'moved'} ${result.events} events of ${result.jobs} jobs finished before ${new Date(before).toISOString()} ` +
          `(${megabytes(result.bytes)}, ${result.streams} streams; ${weeks}${flags.exact === true ? ', the rest row by row' : ''}) to events_archive${movedOn}; ` +
          `${result.liveEvents} events ${dry ? 'would stay' : 'stay'} live`
        );
      });
    });
};

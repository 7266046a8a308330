import type { Command } from 'commander';
import ms from 'ms';
import { withReader, type CommandContext } from '../context.js';
import { oneLine, print, table, time } from '../output.js';

export const registerKeys = (program: Command, ctx: CommandContext): void => {
  program
    .command('keys')
    .description('every concurrency key: limit, slots in use, parked and scheduled jobs, oldest wait, lease state (live / expired / none), quarantine, pause')
    .option('--json', 'machine-readable output')
    .action(async (flags: { json?: boolean }) => {
      // The read side alone (no key writer): a command run often, that must answer at once.
      const { keys, now } = await withReader(ctx, async (reader) => ({ keys: await reader.keys(), now: reader.now() }));
      // Why, and where to look: the event's place in the ledger and the decoder's complaint.
      const quarantined = keys.flatMap(({ key, quarantine: q }) =>
        q === null ? [] : [`${oneLine(key)}: quarantined since ${time(q.firstSeen)} (${q.readers.join(', ')}): revision ${q.revision}, global position ${q.position}: ${oneLine(q.error)}`],
      );
      print({ json: flags.json === true }, keys, () =>
        keys.length === 0
          ? 'no keys yet'
          : [
              table(
                ['key', 'limit', 'in use', 'parked', 'scheduled', 'oldest wait', 'lease', 'next expiry', 'quarantined', 'paused'],
                keys.map((k) => [
                  k.key,
                  k.limit,
                  `${k.inUse}${k.atLimit ? ' (full)' : ''}`,
                  k.parked,
                  k.scheduled,
                  k.oldestParkedAt === null ? '' : ms(Math.max(0, now - k.oldestParkedAt)),
                  k.leaseState,
                  time(k.nextLeaseExpiry),
                  k.quarantine === null ? '' : `at revision ${k.quarantine.revision}`,
                  k.paused === null ? '' : `by ${k.paused.by}${k.paused.reason === null ? '' : `: ${k.paused.reason}`}`,
                ]),
              ),
              ...quarantined,
              ...(quarantined.length > 0 ? ['a quarantined key refuses its commands and its jobs wait until the event decodes again (fixed, or read by a release that knows it); the next successful read ends the quarantine'] : []),
            ].join('\n'),
      );
    });
};

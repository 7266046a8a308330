import type { Command } from 'commander';
import ms from 'ms';
import type { KeyPageQuery } from '../../postgres/queries/key-page.js';
import { DEFAULT_KEY_PAGE, KEY_SORTS, MAX_KEY_PAGE } from '../../postgres/queries/key-page-options.js';
import type { KeyRow } from '../../postgres/queries/list-keys.js';
import { UNSTARTED_WARNING_MS } from '../../http/routes/warnings.js';
import { withReader, type CommandContext } from '../context.js';
import { asUsage, UsageError } from '../errors.js';
import { oneLine, print, table, time } from '../output.js';
import { integer } from '../parse.js';

const FLAG_OF = { limit: '--limit', offset: '--offset', sort: '--sort', dir: '--dir', match: '--match' };

interface Flags {
  readonly json?: boolean;
  readonly all?: boolean;
  readonly limit?: number;
  readonly offset?: number;
  readonly sort?: string;
  readonly dir?: string;
  readonly match?: string;
  readonly atLimit?: boolean;
  readonly attention?: boolean;
}

const PAGE_FLAGS = ['limit', 'offset', 'sort', 'dir', 'match', 'atLimit', 'attention'] as const;

export const registerKeys = (program: Command, ctx: CommandContext): void => {
  program
    .command('keys')
    .description(
      `the concurrency keys: limit, slots in use, parked and scheduled jobs, oldest wait, lease state (live / expired / none), quarantine, pause; a page of them (${DEFAULT_KEY_PAGE}, those needing attention and those at their limit first), as the dashboard lists them`,
    )
    .option('--limit <n>', `keys of the page (default ${DEFAULT_KEY_PAGE}, at most ${MAX_KEY_PAGE})`, integer('--limit'))
    .option('--offset <n>', 'keys of the order to pass over (the next page: the last one printed)', integer('--offset'))
    .option('--sort <order>', `${Object.keys(KEY_SORTS).join(', ')} (default attention)`)
    .option('--dir <dir>', 'asc or desc (default: the order\'s own)')
    .option('--match <text>', 'only keys containing this text, whatever its case')
    .option('--at-limit', 'only keys at their limit')
    .option('--attention', 'only keys needing attention (holders unstarted too long, worker gone or lease run out; quarantined)')
    .option('--all', 'every key, by key, unpaged (on a ledger of many keys, long)')
    .option('--json', 'machine-readable output (the page: order, totals, matched, keys; with --all, the keys)')
    .action(async (flags: Flags) => {
      const paging = PAGE_FLAGS.find((f) => flags[f] !== undefined);
      if (flags.all === true && paging !== undefined) throw new UsageError(`--${paging === 'atLimit' ? 'at-limit' : paging}: pages the keys; --all lists every one`);
      // The read side alone (no key writer): a command run often, that must answer at once.
      const { keys, page, now } = await withReader(ctx, async (reader) => {
        const now = reader.now();
        if (flags.all === true) return { keys: await reader.keys(), page: null, now };
        const query: KeyPageQuery = {
          unstartedAfterMs: UNSTARTED_WARNING_MS,
          ...(flags.limit === undefined ? {} : { limit: flags.limit }),
          ...(flags.offset === undefined ? {} : { offset: flags.offset }),
          ...(flags.sort === undefined ? {} : { sort: flags.sort as KeyPageQuery['sort'] }),
          ...(flags.dir === undefined ? {} : { dir: flags.dir as KeyPageQuery['dir'] }),
          ...(flags.match === undefined ? {} : { match: flags.match }),
          ...(flags.atLimit === undefined ? {} : { atLimit: true }),
          ...(flags.attention === undefined ? {} : { attention: true }),
        };
        const page = await reader.keyPage(query, now).catch(asUsage(FLAG_OF));
        return { keys: page.keys as readonly KeyRow[], page, now };
      });
      // Why, and where to look: the event's place in the ledger and the decoder's complaint.
      const quarantined = keys.flatMap(({ key, quarantine: q }) =>
        q === null ? [] : [`${oneLine(key)}: quarantined since ${time(q.firstSeen)} (${q.readers.join(', ')}): revision ${q.revision}, global position ${q.position}: ${oneLine(q.error)}`],
      );
      const where =
        page === null
          ? []
          : [
              `keys ${page.keys.length === 0 ? 0 : page.order.offset + 1}–${page.order.offset + page.keys.length} of ${page.matched}` +
                (page.matched === page.totals.keys ? '' : ` matching (${page.totals.keys} keys)`) +
                `, by ${page.order.sort} (${page.order.dir})` +
                (page.order.offset + page.keys.length < page.matched ? `; next: --offset ${page.order.offset + page.keys.length}` : ''),
            ];
      print({ json: flags.json === true }, page ?? keys, () =>
        keys.length === 0 && (page === null || page.matched === 0)
          ? page !== null && page.totals.keys > 0
            ? `no key matches (${page.totals.keys} keys)`
            : 'no keys yet'
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
              ...where,
              ...quarantined,
              ...(quarantined.length > 0 ? ['a quarantined key refuses its commands and its jobs wait until the event decodes again (fixed, or read by a release that knows it); the next successful read ends the quarantine'] : []),
            ].join('\n'),
      );
    });
};

import type { Command } from 'commander';
import type { Ledger } from '../../ledger.js';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';
import { PASSES_ON, refusalOf, standingOf, unchanged } from './unchanged.js';

const FLAG_OF = { key: '--key', jobId: '--job', by: '--by' };

type Flags = ByFlag & { key: string; job?: string; force?: boolean; json?: boolean };

/**
 * Why a release revoked no lease, from the key as it is now: no holder of its own, or each one's
 * lease revoked already and waiting for its handler (a release without --force adds nothing then).
 */
const whyNoneReleased = async (ledger: Ledger, flags: Flags): Promise<never> => {
  // A key lists its first 100 holders unless asked for more (up to 1,000): a holder named by --job is looked for among all it lists.
  const detail = await ledger.keyDetail(flags.key, undefined, flags.job === undefined ? undefined : 1_000);
  if (flags.job !== undefined) {
    const revoked = detail?.holders.find((h) => h.jobId === flags.job)?.revoked;
    return unchanged(`job ${flags.job} on key ${flags.key} is already being ${revoked?.cancels ? 'cancelled' : 'released'}${revoked ? ` (by ${revoked.by})` : ''}`, `${PASSES_ON}; --force frees it now`);
  }
  const own = detail?.counts.ownHolders ?? 0;
  const guests = (detail?.counts.holders ?? 0) - own;
  if (own > 0) return unchanged(`every holder of key ${flags.key} (${own}) is already being released`, `${PASSES_ON}; --force frees them now`);
  if (guests > 0) return unchanged(`key ${flags.key} has no holder of its own (its ${guests} holders are jobs of other keys)`, 'release them at their own keys');
  return unchanged(`key ${flags.key} has no holder`, 'there is no lease to revoke');
};

export const registerRelease = (program: Command, ctx: CommandContext): void => {
  withBy(
    program
      .command('release')
      .description("revoke a holder's lease (or every holder's): a running job's handler is told to stop and its slot goes to the next parked job once it has (or its lease lapses), then it is retried later; a holder that never started lets its slot go at once and waits in line again; nothing to revoke is exit 2")
      .requiredOption('--key <key>', 'the concurrency key')
      .option('--job <id>', 'only this holder')
      .option('--force', "free a running holder's slot now instead of once its handler stopped: only when no handler runs (its worker is gone); recorded as forced"),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: Flags) => {
      const input = { key: flags.key, by: flags.by, ...(flags.job !== undefined ? { jobId: flags.job } : {}), ...(flags.force === true ? { force: true } : {}) };
      const result = await withLedger(ctx, async (ledger) => {
        const released = await ledger.release(input, CLI_METADATA).catch(asUsage(FLAG_OF)).catch(async (error: unknown) => {
          if ((await refusalOf(error))?.tag === 'NotHolding') unchanged(`job ${flags.job} is ${await standingOf(ledger, flags.job!, flags.key)}, not holding a slot of key ${flags.key}`, "only a holder's lease is revoked");
          throw error;
        });
        return released.released.length > 0 ? released : whyNoneReleased(ledger, flags);
      });
      print({ json: flags.json === true }, result, () =>
        result.released.map((jobId) => `revoked the lease of job ${jobId} on key ${flags.key} (by ${flags.by})${result.stopping.includes(jobId) ? `; it is running: ${PASSES_ON}` : ''}`).join('\n'),
      );
    });
};

import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { UsageError, asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';
import { jobsStanding, refusalOf, unchanged } from './unchanged.js';

const FLAG_OF = { key: '--key', jobIds: '--job', by: '--by' };

const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value];

type Flags = ByFlag & { key?: string; job?: string[]; dead?: boolean; json?: boolean };

export const registerDiscard = (program: Command, ctx: CommandContext): void => {
  withBy(
    program
      .command('discard')
      .description('drop parked jobs of a key (parked jobs never expire on their own): the named ones, or all of them; with --dead, dead jobs (off the failed list for good); nothing to drop is exit 2')
      .option('--key <key>', 'the concurrency key (with --dead and no --job: every dead job of the key)')
      .option('--job <id>', 'only this job (repeat for several)', collect)
      .option('--dead', 'discard dead jobs instead of parked ones'),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: Flags) => (flags.dead === true ? discardDead(ctx, flags) : discardParked(ctx, flags)));
};

const discardParked = async (ctx: CommandContext, flags: Flags): Promise<void> => {
  if (flags.key === undefined) throw new UsageError('--key: required (the key of the parked jobs), or --dead to discard dead jobs');
  const key = flags.key;
  const input = { key, by: flags.by, ...(flags.job !== undefined ? { jobIds: flags.job } : {}) };
  const result = await withLedger(ctx, async (ledger) => {
    const discarded = await ledger.discard(input, CLI_METADATA).catch(asUsage(FLAG_OF)).catch(async (error: unknown) => {
      const refusal = await refusalOf(error);
      if (refusal?.tag === 'NotParked') unchanged(`${await jobsStanding(ledger, refusal.jobIds, key)}, not parked on key ${key}`, 'only a parked job is discarded');
      throw error;
    });
    if (discarded.discarded.length > 0) return discarded;
    // Every parked job of the key when none was named: a job of another key waiting here is discarded at its own.
    const counts = (await ledger.keyDetail(key))?.counts;
    const guests = (counts?.parked ?? 0) - (counts?.ownParked ?? 0);
    if (guests > 0) return unchanged(`key ${key} has no parked job of its own (its ${guests} parked jobs are of other keys)`, 'discard them at their own keys');
    return unchanged(`key ${key} has no parked job`, 'there is no job to discard');
  });
  print({ json: flags.json === true }, result, () => result.discarded.map((jobId) => `discarded parked job ${jobId} on key ${key} (by ${flags.by})`).join('\n'));
};

const discardDead = async (ctx: CommandContext, flags: Flags): Promise<void> => {
  if ((flags.key === undefined) === (flags.job === undefined)) throw new UsageError('--job: with --dead, give --job ID (repeat for several) or --key K (every dead job of the key), one of them');
  const input = flags.job !== undefined ? { jobIds: flags.job, by: flags.by } : { key: flags.key!, by: flags.by };
  const result = await withLedger(ctx, (ledger) => ledger.discardDead(input, CLI_METADATA).catch(asUsage(FLAG_OF)));
  // A named job that is not dead is the decider's refusal (NotDead), which names it; a key with none is this.
  if (result.discarded.length === 0) unchanged(`key ${flags.key} has no dead job`, 'only a dead job is discarded as dead');
  print({ json: flags.json === true }, result, () => result.discarded.map((jobId) => `discarded dead job ${jobId} (by ${flags.by})`).join('\n'));
};

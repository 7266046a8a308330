import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { UsageError, asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';
import { unchanged } from './unchanged.js';

const FLAG_OF = { key: '--key', jobIds: '--job', by: '--by' };

const collect = (value: string, previous: string[] | undefined): string[] => [...(previous ?? []), value];

export const registerRetry = (program: Command, ctx: CommandContext): void => {
  withBy(
    program
      .command('retry')
      .description('run dead jobs again, recorded with who: each keeps its id, gets a fresh set of attempts and takes a free slot or the back of its line; all or nothing; a job not dead (or a key with none) is exit 2')
      .option('--job <id>', 'this dead job (repeat for several)', collect)
      .option('--key <key>', 'with --dead: every dead job of the key')
      .option('--dead', 'with --key: the dead jobs of the key'),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: ByFlag & { job?: string[]; key?: string; dead?: boolean; json?: boolean }) => {
      if (flags.key !== undefined && flags.dead !== true) throw new UsageError('--dead: retry --key K takes --dead (every dead job of the key)');
      if ((flags.key === undefined) === (flags.job === undefined)) throw new UsageError('--job: give --job ID (repeat for several) or --key K --dead, one of them');
      const input = flags.job !== undefined ? { jobIds: flags.job, by: flags.by } : { key: flags.key!, by: flags.by };
      const result = await withLedger(ctx, (ledger) => ledger.retry(input, CLI_METADATA).catch(asUsage(FLAG_OF)));
      // A named job that is not dead is the decider's refusal (NotDead), which names it; a key with none is this.
      if (result.retried.length === 0) unchanged(`key ${flags.key} has no dead job`, 'only a dead job is retried');
      print({ json: flags.json === true }, result, () =>
        result.retried.map((r) => `retried dead job ${r.jobId} (by ${flags.by}): ${r.status === 'acquired' ? 'took a free slot' : 'parked at the back of its line'}`).join('\n'),
      );
    });
};

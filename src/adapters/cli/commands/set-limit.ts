import type { Command } from 'commander';
import ms from 'ms';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';
import { duration, integer } from '../parse.js';
import { unchanged } from './unchanged.js';

const FLAG_OF = { key: '--key', limit: '--limit', leaseMs: '--lease', by: '--by' };

export const registerSetLimit = (program: Command, ctx: CommandContext): void => {
  withBy(
    program
      .command('set-limit')
      .description("change a key's limit (and its lease): a raise promotes parked jobs at once; a lowered limit preempts no one (holders above it finish); the limit and lease the key has already are exit 2")
      .requiredOption('--key <key>', 'the concurrency key')
      .requiredOption('--limit <n>', 'at most n jobs of the key run at once', integer('--limit'))
      .option('--lease <duration>', "the key's lease from now on (jobs enqueued later without a lease of their own take it)", duration('--lease')),
  )
    .option('--json', 'machine-readable output')
    .action(async (flags: ByFlag & { key: string; limit: number; lease?: number; json?: boolean }) => {
      const input = { key: flags.key, limit: flags.limit, by: flags.by, ...(flags.lease === undefined ? {} : { leaseMs: flags.lease }) };
      const result = await withLedger(ctx, async (ledger) => {
        // The decider writes nothing for the limit and lease the key has: the key's revision, the
        // same after as before, says so (a write of someone else's between them reads as a change).
        // Its key checked first, as setLimit checks it: keyState reads whatever it is given.
        const { Key, checkField } = await import('../../../domain/values.js');
        const before = await Promise.resolve()
          .then(() => ledger.keyState(checkField('key', Key, flags.key)))
          .catch(asUsage(FLAG_OF));
        const set = await ledger.setLimit(input, CLI_METADATA).catch(asUsage(FLAG_OF));
        const after = await ledger.keyState(flags.key);
        if (after.revision === before.revision) unchanged(`key ${flags.key} has limit ${after.state.limit} and lease ${ms(after.state.leaseMs)} already`, 'a limit set again records nothing');
        return set;
      });
      print({ json: flags.json === true }, result, () =>
        [`key ${flags.key}: limit ${result.limit} (by ${flags.by})`, ...result.promoted.map((jobId) => `promoted parked job ${jobId}`)].join('\n'),
      );
    });
};

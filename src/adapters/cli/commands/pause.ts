import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';

const FLAG_OF = { key: '--key', by: '--by', reason: '--reason' };

type PauseFlags = ByFlag & { key: string; reason?: string; json?: boolean };

/** `pause` and `resume`: the same flags, one command of the key's decider each, recorded with who and why. */
export const registerPause = (program: Command, ctx: CommandContext): void => {
  const define = (name: string, description: string) =>
    withBy(program.command(name).description(description).requiredOption('--key <key>', 'the concurrency key'))
      .option('--reason <text>', 'why, recorded with the event')
      .option('--json', 'machine-readable output');
  const input = (flags: PauseFlags) => ({ key: flags.key, by: flags.by, ...(flags.reason !== undefined ? { reason: flags.reason } : {}) });

  define('pause', 'stop admitting jobs on a key: holders finish, parked jobs keep their order, new jobs park (refused when already paused)').action(async (flags: PauseFlags) => {
    const result = await withLedger(ctx, (ledger) => ledger.pause(input(flags), CLI_METADATA).catch(asUsage(FLAG_OF)));
    print({ json: flags.json === true }, result, () => `key ${flags.key}: paused (by ${flags.by}${flags.reason === undefined ? '' : `: ${flags.reason}`})`);
  });

  define('resume', "admit jobs on a paused key again: its free slots go to the parked jobs at once").action(async (flags: PauseFlags) => {
    const result = await withLedger(ctx, (ledger) => ledger.resume(input(flags), CLI_METADATA).catch(asUsage(FLAG_OF)));
    print({ json: flags.json === true }, result, () => [`key ${flags.key}: resumed (by ${flags.by})`, ...result.promoted.map((jobId) => `promoted parked job ${jobId}`)].join('\n'));
  });
};

import type { Command } from 'commander';
import { withLedger, type CommandContext } from '../context.js';
import { asUsage } from '../errors.js';
import { CLI_METADATA, withBy, type ByFlag } from '../operator.js';
import { print } from '../output.js';
import { refusalOf, unchanged } from './unchanged.js';

const FLAG_OF = { key: '--key', by: '--by', reason: '--reason' };

type PauseFlags = ByFlag & { key: string; reason?: string; json?: boolean };

/** The decider's refusal of a pause or a resume said as every operator action says nothing was done: the key, where it stands, why. */
const namingTheKey = (key: string) => async (error: unknown): Promise<never> => {
  const refusal = await refusalOf(error);
  if (refusal?.tag === 'AlreadyPaused') unchanged(`key ${key} is already paused (by ${refusal.by}${refusal.reason === null ? '' : `: ${refusal.reason}`})`, 'a pause keeps the first who and why');
  if (refusal?.tag === 'NotPaused') unchanged(`key ${key} is not paused`, 'only a paused key is resumed');
  throw error;
};

/** `pause` and `resume`: the same flags, one command of the key's decider each, recorded with who and why. */
export const registerPause = (program: Command, ctx: CommandContext): void => {
  const define = (name: string, description: string) =>
    withBy(program.command(name).description(description).requiredOption('--key <key>', 'the concurrency key'))
      .option('--reason <text>', 'why, recorded with the event')
      .option('--json', 'machine-readable output');
  const input = (flags: PauseFlags) => ({ key: flags.key, by: flags.by, ...(flags.reason !== undefined ? { reason: flags.reason } : {}) });

  define('pause', 'stop admitting jobs on a key: holders finish, parked jobs keep their order, new jobs park (a paused key is left as it is: exit 2)').action(async (flags: PauseFlags) => {
    const result = await withLedger(ctx, (ledger) => ledger.pause(input(flags), CLI_METADATA).catch(asUsage(FLAG_OF)).catch(namingTheKey(flags.key)));
    print({ json: flags.json === true }, result, () => `key ${flags.key}: paused (by ${flags.by}${flags.reason === undefined ? '' : `: ${flags.reason}`})`);
  });

  define('resume', 'admit jobs on a paused key again: its free slots go to the parked jobs at once (a key not paused is left as it is: exit 2)').action(async (flags: PauseFlags) => {
    const result = await withLedger(ctx, (ledger) => ledger.resume(input(flags), CLI_METADATA).catch(asUsage(FLAG_OF)).catch(namingTheKey(flags.key)));
    print({ json: flags.json === true }, result, () => [`key ${flags.key}: resumed (by ${flags.by})`, ...result.promoted.map((jobId) => `promoted parked job ${jobId}`)].join('\n'));
  });
};

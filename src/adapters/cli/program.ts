import { Command, CommanderError } from 'commander';
import { RefusedError, UnknownJobError, UnknownKeyError } from '../../domain/errors.js';
import { ValidationError } from '../../domain/values.js';
import { registerAudit } from './commands/audit.js';
import { registerCancel } from './commands/cancel.js';
import { registerDemo } from './commands/demo.js';
import { registerDiscard } from './commands/discard.js';
import { registerEnqueue } from './commands/enqueue.js';
import { registerJobs } from './commands/jobs.js';
import { registerKeys } from './commands/keys.js';
import { registerMigrate } from './commands/migrate.js';
import { registerRelease } from './commands/release.js';
import { registerReplay } from './commands/replay.js';
import { registerServe } from './commands/serve.js';
import { registerPause } from './commands/pause.js';
import { registerSetLimit } from './commands/set-limit.js';
import { registerState } from './commands/state.js';
import { registerWorker } from './commands/worker.js';
import type { CommandContext } from './context.js';
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError } from './errors.js';
import { oneLine } from './output.js';

export const buildProgram = (ctx: CommandContext, version: string): Command => {
  const program = new Command('jobledger')
    .description('durable background jobs with per-key concurrency limits and a replayable audit ledger.\nPostgreSQL from DATABASE_URL, else an embedded one in $JOBLEDGER_HOME or ./.jobledger')
    .version(version)
    .showHelpAfterError()
    .exitOverride();
  for (const register of [
    registerMigrate,
    registerEnqueue,
    registerWorker,
    registerServe,
    registerKeys,
    registerJobs,
    registerAudit,
    registerState,
    registerRelease,
    registerDiscard,
    registerSetLimit,
    registerPause,
    registerCancel,
    registerReplay,
    registerDemo,
  ])
    register(program, ctx);
  for (const command of program.commands) command.exitOverride();
  return program;
};

/**
 * Runs one command line (`argv` as process.argv: node, script, arguments) and returns its exit
 * code: 0, 2 for input it cannot act on, 1 for anything else. An error is one line on stderr,
 * never a stack trace (that goes to the debug log).
 */
export const runCli = async (ctx: CommandContext, version: string, argv: readonly string[]): Promise<number> => {
  try {
    await buildProgram(ctx, version).parseAsync([...argv]);
    return EXIT_OK;
  } catch (error) {
    if (error instanceof CommanderError) {
      // help and --version end here too, with exit code 0; commander has printed the message
      return error.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    // Input the ledger cannot act on: a bad value, an unknown key or job, an action the key's state refuses.
    const usage = error instanceof UsageError || error instanceof ValidationError || error instanceof UnknownKeyError || error instanceof UnknownJobError || error instanceof RefusedError;
    process.stderr.write(`error: ${oneLine(error instanceof Error ? error.message : String(error))}\n`);
    if (!usage) ctx.logger.debug({ err: error }, 'command failed');
    return usage ? EXIT_USAGE : EXIT_FAILURE;
  }
};

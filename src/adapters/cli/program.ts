import { Command, CommanderError } from 'commander';
import type { CommandContext } from './context.js';
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE, isUsage } from './errors.js';
import { oneLine } from './output.js';

// Every command, in the order `jobledger --help` lists them; a new command is one line. A command
// file registers its name, options and help with commander and light modules only, and imports
// what its action needs (the ledger, pg, fastify) inside the action: `jobledger --help`,
// `--version` and a command's own help load none of it (test/cli/start.e2e.test.ts).
type Register = (program: Command, ctx: CommandContext) => void;

const COMMANDS: readonly Register[] = [
  (await import('./commands/migrate.js')).registerMigrate,
  (await import('./commands/enqueue.js')).registerEnqueue,
  (await import('./commands/worker.js')).registerWorker,
  (await import('./commands/serve.js')).registerServe,
  (await import('./commands/keys.js')).registerKeys,
  (await import('./commands/workers.js')).registerWorkers,
  (await import('./commands/jobs.js')).registerJobs,
  (await import('./commands/audit.js')).registerAudit,
  (await import('./commands/state.js')).registerState,
  (await import('./commands/release.js')).registerRelease,
  (await import('./commands/discard.js')).registerDiscard,
  (await import('./commands/set-limit.js')).registerSetLimit,
  (await import('./commands/pause.js')).registerPause,
  (await import('./commands/cancel.js')).registerCancel,
  (await import('./commands/retry.js')).registerRetry,
  (await import('./commands/explain.js')).registerExplain,
  (await import('./commands/job.js')).registerJob,
  (await import('./commands/archive.js')).registerArchive,
  (await import('./commands/replay.js')).registerReplay,
  (await import('./commands/demo.js')).registerDemo,
];

/** commander's error as one line: its suggestion ("\n(Did you mean enqueue?)") joins the message. */
const errorLine = (message: string): string => `${oneLine(message.trimEnd().replace(/\n\(Did you mean (.*)\?\)$/, ' (did you mean $1?)'))}\n`;

export const buildProgram = (ctx: CommandContext, version: string): Command => {
  const program = new Command('jobledger')
    .description('durable background jobs with per-key concurrency limits and a replayable audit ledger.\nPostgreSQL from DATABASE_URL, else an embedded one in $JOBLEDGER_HOME or ./.jobledger')
    .version(version)
    .configureOutput({ outputError: (message, write) => write(errorLine(message)) })
    .exitOverride();
  if (ctx.prepare !== undefined) program.hook('preAction', ctx.prepare);
  for (const register of COMMANDS) register(program, ctx);
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
    const usage = await isUsage(error);
    process.stderr.write(`error: ${oneLine(error instanceof Error ? error.message : String(error))}\n`);
    if (!usage) ctx.logger.debug({ err: error }, 'command failed');
    return usage ? EXIT_USAGE : EXIT_FAILURE;
  }
};

import { Command, CommanderError } from 'commander';
import type { CommandContext } from './context.js';
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE, isUsage } from './errors.js';
import { oneLine } from './output.js';

// Every command, in the order `jobledger --help` lists them; a new command is one line. A command
// file registers its name, options and help with commander and light modules only, and imports
// what its action needs (the ledger, pg, fastify) inside the action: `jobledger --help`,
// `--version` and a command's own help load none of it (test/cli/start.e2e.test.ts). A command
// line that names a command loads that command's file alone.
type Register = (program: Command, ctx: CommandContext) => void;

const COMMANDS: Readonly<Record<string, () => Promise<Register>>> = {
  migrate: async () => (await import('./commands/migrate.js')).registerMigrate,
  enqueue: async () => (await import('./commands/enqueue.js')).registerEnqueue,
  worker: async () => (await import('./commands/worker.js')).registerWorker,
  serve: async () => (await import('./commands/serve.js')).registerServe,
  keys: async () => (await import('./commands/keys.js')).registerKeys,
  workers: async () => (await import('./commands/workers.js')).registerWorkers,
  jobs: async () => (await import('./commands/jobs.js')).registerJobs,
  audit: async () => (await import('./commands/audit.js')).registerAudit,
  state: async () => (await import('./commands/state.js')).registerState,
  release: async () => (await import('./commands/release.js')).registerRelease,
  discard: async () => (await import('./commands/discard.js')).registerDiscard,
  'set-limit': async () => (await import('./commands/set-limit.js')).registerSetLimit,
  pause: async () => (await import('./commands/pause.js')).registerPause,
  cancel: async () => (await import('./commands/cancel.js')).registerCancel,
  retry: async () => (await import('./commands/retry.js')).registerRetry,
  explain: async () => (await import('./commands/explain.js')).registerExplain,
  job: async () => (await import('./commands/job.js')).registerJob,
  archive: async () => (await import('./commands/archive.js')).registerArchive,
  replay: async () => (await import('./commands/replay.js')).registerReplay,
  demo: async () => (await import('./commands/demo.js')).registerDemo,
};

/** commander's error as one line: its suggestion ("\n(Did you mean enqueue?)") joins the message. */
const errorLine = (message: string): string => `${oneLine(message.trimEnd().replace(/\n\(Did you mean (.*)\?\)$/, ' (did you mean $1?)'))}\n`;

/**
 * The program with every command, or (`only`) with the one a command line names: its help,
 * options and action are all that line can reach. (`pause` registers `resume` beside it.)
 */
export const buildProgram = async (ctx: CommandContext, version: string, only?: string): Promise<Command> => {
  const program = new Command('jobledger')
    .description('durable background jobs with per-key concurrency limits and a replayable audit ledger.\nPostgreSQL from DATABASE_URL, else an embedded one in $JOBLEDGER_HOME or ./.jobledger')
    .version(version)
    .configureOutput({ outputError: (message, write) => write(errorLine(message)) })
    .exitOverride();
  if (ctx.prepare !== undefined) program.hook('preAction', ctx.prepare);
  const names = only === undefined ? Object.keys(COMMANDS) : [only];
  for (const register of await Promise.all(names.map((name) => COMMANDS[name]!()))) register(program, ctx);
  for (const command of program.commands) command.exitOverride();
  return program;
};

/** The command a line names (its first argument), when it is one with a file of its own: only that file is needed. */
const commandOf = (argv: readonly string[]): string | undefined => {
  const first = argv[2] === 'resume' ? 'pause' : argv[2];
  return first !== undefined && Object.hasOwn(COMMANDS, first) ? first : undefined;
};

/**
 * Runs one command line (`argv` as process.argv: node, script, arguments) and returns its exit
 * code: 0, 2 for input it cannot act on, 1 for anything else. An error is one line on stderr,
 * never a stack trace (that goes to the debug log).
 */
export const runCli = async (ctx: CommandContext, version: string, argv: readonly string[]): Promise<number> => {
  try {
    await (await buildProgram(ctx, version, commandOf(argv))).parseAsync([...argv]);
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

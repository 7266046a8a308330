import { Command } from 'commander';
import { registerDemo } from './commands/demo.js';
import { registerEnqueue } from './commands/enqueue.js';
import { registerMigrate } from './commands/migrate.js';
import { registerServe } from './commands/serve.js';
import { registerState } from './commands/state.js';
import { registerWorker } from './commands/worker.js';
import type { CommandContext } from './context.js';

export const buildProgram = (ctx: CommandContext, version: string): Command => {
  const program = new Command('jobledger')
    .description('durable background jobs with per-key concurrency limits and a replayable audit ledger.\nPostgreSQL from DATABASE_URL, else an embedded one in $JOBLEDGER_HOME or ./.jobledger')
    .version(version)
    .showHelpAfterError()
    .exitOverride();
  for (const register of [registerMigrate, registerEnqueue, registerState, registerWorker, registerServe, registerDemo]) register(program, ctx);
  for (const command of program.commands) command.exitOverride();
  return program;
};

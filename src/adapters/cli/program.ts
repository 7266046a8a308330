import { Command } from 'commander';
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
import { registerSetLimit } from './commands/set-limit.js';
import { registerState } from './commands/state.js';
import { registerWorker } from './commands/worker.js';
import type { CommandContext } from './context.js';

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
    registerCancel,
    registerReplay,
    registerDemo,
  ])
    register(program, ctx);
  for (const command of program.commands) command.exitOverride();
  return program;
};

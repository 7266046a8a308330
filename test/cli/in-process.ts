import { Command } from 'commander';
import type { CommandContext } from '../../src/adapters/cli/context.js';
import { runCli } from '../../src/adapters/cli/program.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import type { CliResult } from '../support/cli.js';

// The CLI's own entry (what main.ts runs) in this process: hundreds of command lines in seconds,
// and arguments a process cannot be given (a NUL, a lone surrogate). One at a time: it takes
// over process.stdout and process.stderr while it runs.

/** Runs `jobledger ...args` against the database at `databaseUrl`; stdout and stderr as the process would have written them. */
export const runCliInProcess = async (databaseUrl: string, args: readonly string[]): Promise<CliResult> => {
  const out: string[] = [];
  const err: string[] = [];
  const { stdout, stderr } = process;
  const writeOut = stdout.write;
  const writeErr = stderr.write;
  const previousUrl = process.env.DATABASE_URL;
  const capture = (into: string[]) => ((chunk: string | Uint8Array) => into.push(String(chunk)) > 0) as typeof stdout.write;
  stdout.write = capture(out);
  stderr.write = capture(err);
  process.env.DATABASE_URL = databaseUrl;
  try {
    const ctx = { logger: silentLogger, note: (line: string) => void err.push(`${line}\n`) };
    const code = await runCli(ctx, '0.0.0-test', ['node', 'jobledger', ...args]);
    return { code, stdout: out.join(''), stderr: err.join('') };
  } finally {
    stdout.write = writeOut;
    stderr.write = writeErr;
    if (previousUrl === undefined) delete process.env.DATABASE_URL;
    else process.env.DATABASE_URL = previousUrl;
  }
};

/**
 * Runs `jobledger ...args` on a program of only these commands, registered as program.ts registers
 * them, in this process: stdout and stderr (commander's and the commands' notes), and what the
 * parse threw (a UsageError, a RefusedError, commander's own), where runCliInProcess gives an exit code.
 */
export const runCommandsInProcess = async (
  databaseUrl: string,
  registers: readonly ((program: Command, ctx: CommandContext) => void)[],
  args: readonly string[],
): Promise<{ stdout: string; stderr: string; thrown: unknown }> => {
  const out: string[] = [];
  const err: string[] = [];
  const write = process.stdout.write;
  const previousUrl = process.env.DATABASE_URL;
  process.stdout.write = ((chunk: string | Uint8Array) => out.push(String(chunk)) > 0) as typeof process.stdout.write;
  process.env.DATABASE_URL = databaseUrl;
  // Set before the commands are added, so each inherits it.
  const program = new Command('jobledger').exitOverride().configureOutput({ writeOut: (s) => void out.push(s), writeErr: (s) => void err.push(s) });
  for (const register of registers) register(program, { logger: silentLogger, note: (line) => void err.push(`${line}\n`) });
  for (const command of program.commands) command.exitOverride();
  let thrown: unknown;
  try {
    await program.parseAsync(['node', 'jobledger', ...args]);
  } catch (error) {
    thrown = error;
  } finally {
    process.stdout.write = write;
    if (previousUrl === undefined) delete process.env.DATABASE_URL;
    else process.env.DATABASE_URL = previousUrl;
  }
  return { stdout: out.join(''), stderr: err.join(''), thrown };
};

/** A line of a stack trace: `    at fn (file:///x.js:12:5)`, `    at node:internal/x:3:9`. */
export const STACK_FRAME = /^\s+at .*:\d+:\d+\)?$/m;

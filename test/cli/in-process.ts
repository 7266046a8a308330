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

/** A line of a stack trace: `    at fn (file:///x.js:12:5)`, `    at node:internal/x:3:9`. */
export const STACK_FRAME = /^\s+at .*:\d+:\d+\)?$/m;

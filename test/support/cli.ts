import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

// The built CLI (npm test builds it first) as a subprocess, against a test database or the embedded PostgreSQL.

const exec = promisify(execFile);
const CLI = new URL('../../dist/src/adapters/cli/main.js', import.meta.url).pathname;

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** The CLI with `env` over this process's environment; a variable set to undefined is left out (e.g. DATABASE_URL, for the embedded PostgreSQL). */
export const runCliWith = async (env: NodeJS.ProcessEnv, args: readonly string[]): Promise<CliResult> => {
  try {
    const { stdout, stderr } = await exec(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, maxBuffer: 8 << 20 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
};

export const runCli = (databaseUrl: string, args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> =>
  runCliWith({ DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn', ...env }, args);

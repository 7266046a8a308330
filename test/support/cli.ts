import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

// The built CLI (npm test builds it first) as a subprocess against a test database.

const exec = promisify(execFile);
const CLI = new URL('../../dist/src/adapters/cli/main.js', import.meta.url).pathname;

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export const runCli = async (databaseUrl: string, args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> => {
  try {
    const { stdout, stderr } = await exec(process.execPath, [CLI, ...args], { env: { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn', ...env } });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
};

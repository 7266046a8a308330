import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { expect } from 'vitest';

// The built CLI (npm test builds it first) as a subprocess, against a test database or the embedded PostgreSQL.

const exec = promisify(execFile);

const { bin } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { bin: { jobledger: string } };
/** The CLI as shipped: package.json's "bin", the bundle rolldown.config.ts builds. */
export const CLI = new URL(`../../${bin.jobledger}`, import.meta.url).pathname;

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  /** Killed at the `killAfterMs` given: it had not exited (absent otherwise). */
  readonly killed?: true;
}

/**
 * The CLI with `env` over this process's environment; a variable set to undefined is left out (e.g.
 * DATABASE_URL, for the embedded PostgreSQL). `killAfterMs`: killed (SIGKILL) if still running then.
 */
export const runCliWith = async (env: NodeJS.ProcessEnv, args: readonly string[], killAfterMs = 0): Promise<CliResult> => {
  try {
    const { stdout, stderr } = await exec(process.execPath, [CLI, ...args], { env: { ...process.env, ...env }, maxBuffer: 8 << 20, timeout: killAfterMs, killSignal: 'SIGKILL' });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string; killed: boolean };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr, ...(e.killed ? { killed: true } : {}) };
  }
};

export const runCli = (databaseUrl: string, args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<CliResult> =>
  runCliWith({ DATABASE_URL: databaseUrl, LOG_LEVEL: 'warn', ...env }, args);

/** Runs a command that must be refused as bad input: exit 2, the message names `named`, and `eventCount` shows nothing written. */
export const expectRefused = async (
  run: (...args: string[]) => Promise<CliResult>,
  eventCount: () => Promise<number>,
  args: readonly string[],
  named: string,
): Promise<void> => {
  const before = await eventCount();
  const result = await run(...args);
  expect(result.code, result.stderr).toBe(2);
  expect(result.stderr).toContain(named);
  expect(await eventCount()).toBe(before);
};

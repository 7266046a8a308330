import { spawn, type ChildProcess } from 'node:child_process';
import { expect } from 'vitest';
import { CLI } from './cli.js';
import { until } from './until.js';

// `jobledger worker` processes of an end-to-end test: started with the CLI's flags and an
// environment, their stderr kept (and echoed with JOBLEDGER_E2E_VERBOSE), stopped or killed.

export interface WorkerProcess {
  readonly name: string;
  readonly child: ChildProcess;
  stderr: string;
  readonly exited: Promise<void>;
}

/** `jobledger worker <args>` with `env` added to this process's. */
export const startWorkerProcess = (name: string, args: readonly string[], env: NodeJS.ProcessEnv): WorkerProcess => {
  const child = spawn(process.execPath, [CLI, 'worker', ...args], { env: { ...process.env, LOG_LEVEL: 'warn', ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const proc: WorkerProcess = { name, child, stderr: '', exited };
  child.stderr?.on('data', (chunk: Buffer) => {
    proc.stderr += chunk.toString();
    if (process.env.JOBLEDGER_E2E_VERBOSE) process.stderr.write(chunk);
  });
  return proc;
};

export const isRunning = (p: WorkerProcess): boolean => p.child.exitCode === null && p.child.signalCode === null;

/** SIGTERM (graceful), SIGKILL after `graceMs`; resolves once the process has exited. */
export const stopWorkerProcess = async (p: WorkerProcess, graceMs = 3_000): Promise<void> => {
  if (!isRunning(p)) return;
  p.child.kill('SIGTERM');
  const timer = setTimeout(() => isRunning(p) && p.child.kill('SIGKILL'), graceMs);
  await p.exited;
  clearTimeout(timer);
};

/** A worker is reading once it said so (after its ledger opened); one that exited first fails the test with its stderr. */
export const untilReading = (p: WorkerProcess, queue: string, timeoutMs?: number): Promise<void> =>
  until(
    async () => ({ reading: p.stderr.includes(`reading queue ${queue}`), exit: p.child.exitCode, stderr: p.stderr.slice(-1_000) }),
    (s) => s.reading || s.exit !== null,
    `${p.name} to read queue ${queue}`,
    timeoutMs,
  ).then((s) => expect(s.exit, s.stderr).toBeNull());

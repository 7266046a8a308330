import type { ChildProcess } from 'node:child_process';
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { STOP_TIMEOUT_MS, USER } from './context.js';

// Processes of the operating system: is a pid alive, is it a postmaster on our data dir, when did
// it start (a pid and its start time name one process even after the pid is reused), stopping one.

/**
 * Whether `pid` is a live postmaster on `dataDir`: 'yes' (verified through its command line),
 * 'maybe' (alive, command line unreadable), or 'no'. Synchronous: an `exit` listener needs it.
 */
export function postmasterOn(pid: number, dataDir: string): 'yes' | 'maybe' | 'no' {
  if (!isAlive(pid)) return 'no';
  let program: string;
  let onDir: boolean;
  try {
    if (existsSync('/proc/self/cmdline')) {
      // Empty for a zombie: that is a dead postmaster too.
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      program = basename(args[0] ?? '');
      onDir = args.includes(dataDir);
    } else {
      // No /proc (macOS): ps joins the arguments with spaces.
      const line = execFileSync('ps', ['-o', 'command=', '-p', String(pid)], { encoding: 'utf8' }).trim();
      program = basename(line.split(/\s+/)[0] ?? '');
      onDir = line.includes(dataDir);
    }
  } catch {
    return isAlive(pid) ? 'maybe' : 'no';
  }
  return (program === 'postgres' || program === 'postmaster') && onDir ? 'yes' : 'no';
}

export const isRoot = (): boolean => process.getuid?.() === 0;

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * A process's start time (/proc/<pid>/stat field 22, clock ticks since boot): with the pid, it
 * names one process even after the pid is reused. null: gone or a zombie; undefined: no /proc.
 */
export function processStart(pid: number): string | null | undefined {
  if (!existsSync('/proc/self/stat')) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[0] === 'Z' ? null : (fields[19] ?? null);
  } catch {
    return null;
  }
}

export const running = (proc: ChildProcess): boolean => proc.exitCode === null && proc.signalCode === null;

/** Sends `signal` (SIGINT: fast shutdown), waits up to 20 s, then SIGKILLs. */
export async function killAndWait(proc: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  if (!running(proc)) return;
  const exited = new Promise<void>((res) => proc.once('exit', () => res()));
  proc.kill(signal);
  const timeout = new AbortController();
  const inTime = await Promise.race([
    exited.then(() => true),
    sleep(STOP_TIMEOUT_MS, false, { signal: timeout.signal }).catch(() => false),
  ]);
  timeout.abort();
  if (!inTime && running(proc)) {
    proc.kill('SIGKILL');
    await exited;
  }
}

/** uid and gid of user `postgres` (who runs PostgreSQL when we are root); undefined if there is none. */
export async function postgresUserIds(): Promise<{ uid: number; gid: number } | undefined> {
  const id = async (flag: string): Promise<number> => Number.parseInt((await promisify(execFile)('id', [flag, USER]).catch(() => ({ stdout: '' }))).stdout, 10);
  const [uid, gid] = await Promise.all([id('-u'), id('-g')]);
  return Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid } : undefined;
}

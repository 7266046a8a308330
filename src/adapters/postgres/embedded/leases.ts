import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isAlive, processStart } from './processes.js';

// Leases on a persistent data dir (see embedded-server.ts): one file per start() of a process,
// so the last process out stops the server, and a dead process's lease counts for nothing.

export const leasesDir = (dataDir: string): string => `${dataDir}.users`;

/** Writes this process's lease on dataDir: `<pid> <start time>`; the file name is unique per start(). */
export function takeLease(dataDir: string): string {
  mkdirSync(leasesDir(dataDir), { recursive: true });
  const path = join(leasesDir(dataDir), `${process.pid}-${randomBytes(4).toString('hex')}`);
  writeFileSync(path, `${process.pid} ${processStart(process.pid) ?? ''}\n`);
  return path;
}

export function dropLease(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}

/** How many leases on dataDir live processes hold; those of dead processes are removed. */
export function liveLeases(dataDir: string): number {
  let live = 0;
  let names: string[];
  try {
    names = readdirSync(leasesDir(dataDir));
  } catch {
    return 0;
  }
  for (const name of names) {
    const path = join(leasesDir(dataDir), name);
    let content: string;
    try {
      content = readFileSync(path, 'utf8');
    } catch {
      continue; // given back meanwhile
    }
    const [pid, start] = content.trim().split(' ');
    if (holdsLease(Number(pid), start ?? '')) live++;
    else dropLease(path);
  }
  return live;
}

/** Whether the process that wrote a lease (pid, start time) still runs: a recycled pid or a zombie does not count. */
function holdsLease(pid: number, start: string): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  const now = processStart(pid);
  return now === undefined ? isAlive(pid) : now !== null && now === start;
}

import { readdir, readFile } from 'node:fs/promises';
import { basename } from 'node:path';

/**
 * PIDs of the live postmasters whose command line names `dataDir`. Backends rename themselves,
 * but one just forked still shows the postmaster's command line for a moment: a process whose
 * parent is itself such a process is a backend, not a second server. A zombie's command line is
 * empty, so an exited one is not counted.
 */
export async function postmasters(dataDir: string): Promise<number[]> {
  const found = new Map<number, number>(); // pid -> parent pid
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const args = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (basename(args[0] ?? '') !== 'postgres' || !args.includes(dataDir)) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => '');
    found.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
  }
  return [...found].filter(([, parent]) => !found.has(parent)).map(([pid]) => pid);
}

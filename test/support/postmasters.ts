import { readdir, readFile } from 'node:fs/promises';
import { basename } from 'node:path';

/**
 * PIDs of the live postmasters whose command line names `dataDir` (backends rename themselves, so
 * only postmasters; a zombie's command line is empty, so an exited one is not counted).
 */
export async function postmasters(dataDir: string): Promise<number[]> {
  const pids: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const args = (await readFile(`/proc/${name}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (basename(args[0] ?? '') === 'postgres' && args.includes(dataDir)) pids.push(Number(name));
  }
  return pids;
}

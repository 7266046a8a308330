import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { CLI, runCliWith } from '../support/cli.js';
import { postmasters } from '../support/postmasters.js';
import { until } from '../support/until.js';

// The built CLI with no DATABASE_URL: every process uses the embedded PostgreSQL in
// JOBLEDGER_HOME, shared through leases (src/adapters/postgres/embedded-server.ts).

const HANDLERS = new URL('../fixtures/noop-handlers.mjs', import.meta.url).pathname;
// Under the OS temp dir, world-searchable: as root, postgres runs as user `postgres` and must reach it.
const base = join(tmpdir(), `jobledger-embedded-e2e-${process.pid}-${randomBytes(4).toString('hex')}`);
const children: ChildProcess[] = [];

const env = (home: string): NodeJS.ProcessEnv => ({ ...process.env, DATABASE_URL: undefined, JOBLEDGER_HOME: home, LOG_LEVEL: 'debug' });

const newHome = async (name: string) => {
  await mkdir(base, { recursive: true });
  await chmod(base, 0o755);
  const home = join(base, name);
  return { home, dataDir: join(home, 'pg'), users: join(home, 'pg.users') };
};

const jobledger = (home: string, ...args: string[]) => runCliWith(env(home), args);

/** `jobledger worker` in the background, in a process group of its own (as in a terminal); resolves once it reads its queue. */
const startWorker = async (home: string): Promise<{ child: ChildProcess; stderr: () => string }> => {
  const child = spawn(process.execPath, [CLI, 'worker', '--handlers', HANDLERS], { env: env(home), stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  children.push(child);
  let stderr = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      if (/worker \S+ reading queue/.test(stderr)) resolve();
    });
    child.once('exit', (code) => reject(new Error(`worker exited (${code}) before it was ready:\n${stderr}`)));
  });
  return { child, stderr: () => stderr };
};

const exited = (child: ChildProcess): Promise<number | null> =>
  child.exitCode !== null || child.signalCode !== null ? Promise.resolve(child.exitCode) : new Promise((res) => child.once('exit', (code) => res(code)));

/** The embedded server's URL, from what the CLI remembers beside the data dir. */
const urlOf = async (dataDir: string, port: number) => {
  const { password } = JSON.parse(await readFile(`${dataDir}.json`, 'utf8')) as { password: string };
  return `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
};

const portOf = async (dataDir: string) => Number((await readFile(join(dataDir, 'postmaster.pid'), 'utf8')).split('\n')[3]);

afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

afterAll(async () => {
  for (const dir of (await readdir(base).catch(() => [] as string[])).map((n) => join(base, n, 'pg'))) {
    for (const pid of await postmasters(dir)) process.kill(pid, 'SIGKILL');
  }
  await rm(base, { recursive: true, force: true });
}, 60_000);

describe('the embedded PostgreSQL shared by CLI processes', () => {
  it('two workers share one server; the first to exit (Ctrl-C) leaves it to the second, which keeps working; the last out stops it', async () => {
    const { home, dataDir, users } = await newHome('shared');
    const first = await startWorker(home);
    const [server] = await postmasters(dataDir);
    expect(server).toBeDefined();
    const second = await startWorker(home);
    expect(second.stderr()).toContain(`reusing the PostgreSQL server already running on ${dataDir} (pid ${server}`);
    expect(await postmasters(dataDir)).toEqual([server]);
    expect(await readdir(users)).toHaveLength(2);

    // A Ctrl-C in the first one's terminal: SIGINT to its whole process group. The server it
    // started runs in a session of its own, so the signal reaches the worker only.
    process.kill(-first.child.pid!, 'SIGINT');
    expect(await exited(first.child)).toBe(0);
    expect(first.stderr()).toContain(`left PostgreSQL on ${dataDir} running for 1 other user`);
    expect(await postmasters(dataDir)).toEqual([server]);

    // The second worker still runs jobs on it; a short command comes and goes meanwhile.
    const enqueued = await jobledger(home, 'enqueue', 'noop', '--key', 'shared', '--job-id', 'after-first', '--json');
    expect(enqueued).toMatchObject({ code: 0 });
    expect(JSON.parse(enqueued.stdout)).toEqual({ jobId: 'after-first', status: 'acquired' });
    const pool = new pg.Pool({ connectionString: await urlOf(dataDir, await portOf(dataDir)), max: 1 });
    pool.on('error', () => undefined);
    try {
      await until(async () => (await pool.query(`SELECT status FROM jl_jobs WHERE job_id = 'after-first'`)).rows[0]?.status, (s) => s === 'completed', 'the job to complete');
    } finally {
      await pool.end();
    }
    expect(await postmasters(dataDir)).toEqual([server]);

    second.child.kill('SIGTERM');
    expect(await exited(second.child)).toBe(0);
    expect(second.stderr()).toContain(`stopped PostgreSQL on ${dataDir} (pid ${server}): no other process uses it`);
    expect(await postmasters(dataDir)).toEqual([]);
    expect(existsSync(join(dataDir, 'postmaster.pid'))).toBe(false);
    expect(await readdir(users)).toEqual([]);
  }, 120_000);

  it('after a SIGKILLed worker, the next commands reuse its server (never a second one), and the last out stops it', async () => {
    const { home, dataDir, users } = await newHome('killed');
    const killed = await startWorker(home);
    const [server] = await postmasters(dataDir);
    killed.child.kill('SIGKILL');
    await exited(killed.child);
    expect(await postmasters(dataDir)).toEqual([server]); // left behind, with the dead process's lease
    expect(await readdir(users)).toHaveLength(1);

    const worker = await startWorker(home);
    expect(worker.stderr()).toContain(`reusing the PostgreSQL server already running on ${dataDir} (pid ${server}`);
    expect(await postmasters(dataDir)).toEqual([server]);
    const keys = await jobledger(home, 'keys', '--json');
    expect(keys).toMatchObject({ code: 0 });
    expect(await postmasters(dataDir)).toEqual([server]); // the worker still uses it

    // Killed again: this time the next command is a short one, the only live user, so it stops the server.
    worker.child.kill('SIGKILL');
    await exited(worker.child);
    const migrate = await jobledger(home, 'migrate');
    expect(migrate).toMatchObject({ code: 0 });
    expect(migrate.stderr).toContain(`reusing the PostgreSQL server already running on ${dataDir} (pid ${server}`);
    expect(migrate.stderr).toContain(`stopped PostgreSQL on ${dataDir} (pid ${server}): no other process uses it`);
    expect(await postmasters(dataDir)).toEqual([]);
    expect(await readdir(users)).toEqual([]);

    // And the next start is a fresh server on the same cluster, with the data kept.
    const again = await jobledger(home, 'enqueue', 'noop', '--key', 'killed', '--job-id', 'kept', '--json');
    expect(JSON.parse(again.stdout)).toEqual({ jobId: 'kept', status: 'acquired' });
    expect(again.stderr).toMatch(/started PostgreSQL on/);
    expect(await postmasters(dataDir)).toEqual([]);
  }, 120_000);
});

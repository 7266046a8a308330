// Measures how long the built CLI takes to start and prints the figures (never asserts on them).
//
//   npm run bench:cli              # DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres
//   npm run bench:cli -- 50        # runs per command line (default 20)
//
// Each command line runs as a fresh process of the CLI as shipped (package.json "bin": the bundle
// of rolldown.config.ts, dist/cli/jobledger.cjs), one at a time, beside the bare `node -e ''`
// start-up; `--help`, `enqueue` and `keys` run unbundled too (tsc's dist/src/adapters/cli/main.js),
// for what the bundle saves. Help and --version: spawn to exit. `keys` and `enqueue` (in a scratch
// database it drops) reach PostgreSQL through a TCP proxy in this process, which notes when each
// connection opens: the first is the command's reachability check (commander, the registrations
// and pg loaded), the second its pool's, for its first statement (enqueue: the ledger's, so the
// ledger's modules are loaded too): the command is at its work. Then the exit.
// Nothing in the CLI is instrumented.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, connect, type AddressInfo, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { quantile, serverName, startCostNote, withScratchDatabase } from './scratch-database.js';

const { bin } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { bin: { jobledger: string } };
const CLI = new URL(`../../${bin.jobledger}`, import.meta.url).pathname;
const UNBUNDLED = new URL('../src/adapters/cli/main.js', import.meta.url).pathname;
const RUNS = Number(process.argv[2] ?? 20);

interface Run {
  readonly exitMs: number;
  /** When each connection to PostgreSQL opened, from the spawn (ms). */
  readonly connectionsMs: readonly number[];
}

/** Forwards connections to `target` and notes when each opens, for the run under way. */
const proxy = async (target: URL) => {
  let opened: number[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    opened.push(performance.now());
    const upstream = connect(Number(target.port || 5432), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => s.destroy());
      s.on('close', () => sockets.delete(s));
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as AddressInfo).port);
  return {
    url: url.toString(),
    /** The connections opened since the last call. */
    take: () => [opened, (opened = [])][0]!,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
};

const runOnce = (args: readonly string[], env: NodeJS.ProcessEnv, connections: () => number[]): Promise<Run> =>
  new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      const exitMs = performance.now() - started;
      if (code !== 0) reject(new Error(`${args.join(' ')} exited ${code}: ${stderr.trim()}`));
      else resolve({ exitMs, connectionsMs: connections().map((t) => t - started) });
    });
  });

const figures = (values: readonly number[]): string => {
  const sorted = [...values].sort((a, b) => a - b);
  return `${quantile(sorted, 0.5).toFixed(0).padStart(5)} ${quantile(sorted, 0.9).toFixed(0).padStart(5)}`;
};

const measure = async (label: string, args: readonly string[], env: NodeJS.ProcessEnv = {}, connections: () => number[] = () => []): Promise<Run[]> => {
  const runs: Run[] = [];
  for (let i = 0; i < RUNS; i++) runs.push(await runOnce(args, env, connections));
  const at = (n: number) => runs.flatMap((r) => (r.connectionsMs[n] === undefined ? [] : [r.connectionsMs[n]!]));
  const reach = at(0).length === 0 ? '' : `  first connection ${figures(at(0))}  at work ${figures(at(1))}`;
  console.log(`${label.padEnd(24)} exit ${figures(runs.map((r) => r.exitMs))}${reach}`);
  return runs;
};

console.log(`CLI start-up, ${RUNS} runs each; ms from spawn, median and p90 (PostgreSQL: ${serverName}); ${startCostNote()}`);
console.log(`${''.padEnd(24)}      median   p90`);
await measure("node -e ''", ['-e', '']);
for (const line of [['--help'], ['--version'], ['keys', '--help'], ['enqueue', '--help']]) await measure(line.join(' '), [CLI, ...line]);
await measure('--help, unbundled', [UNBUNDLED, '--help']);

await withScratchDatabase('cli_start', async (url) => {
  const pg = await proxy(new URL(url));
  try {
    const env = { DATABASE_URL: pg.url, LOG_LEVEL: 'warn' };
    // The schema first, so that no measured run pays for the migrations.
    await runOnce([CLI, 'migrate'], env, pg.take);
    const enqueue = ['enqueue', 'bench', '--key', 'bench:cli-start', '--limit', '1000'];
    await measure('enqueue', [CLI, ...enqueue], env, pg.take);
    await measure('keys', [CLI, 'keys'], env, pg.take);
    await measure('enqueue, unbundled', [UNBUNDLED, ...enqueue], env, pg.take);
    await measure('keys, unbundled', [UNBUNDLED, 'keys'], env, pg.take);
  } finally {
    await pg.close();
  }
});

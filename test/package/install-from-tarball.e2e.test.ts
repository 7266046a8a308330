import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

// jobledger as a user gets it: `npm pack` (its prepare script builds), the tarball installed into a
// new project (from the npm registry for its dependencies, the cache first), a program there that
// imports `jobledger` and runs a job through a key of limit 1, and the package's `jobledger` bin.
// The pack runs on a copy of what the build reads (node_modules linked), never on this checkout's
// dist, which the other tests of this run use meanwhile.

const exec = promisify(execFile);
const REPO = fileURLToPath(new URL('../../', import.meta.url));
/** What the build reads; the rest of the checkout (tests, bench) is not packed. */
const BUILD_INPUTS = ['package.json', 'README.md', 'LICENSE', 'tsconfig.json', 'tsconfig.build.json', 'rolldown.config.ts', 'src'];
const { version } = JSON.parse(await readFile(join(REPO, 'package.json'), 'utf8')) as { version: string };

const npm = (cwd: string, ...args: string[]) => exec('npm', [...args, '--no-audit', '--no-fund'], { cwd, maxBuffer: 32 << 20, env: { ...process.env, npm_config_update_notifier: 'false' } });

const PROGRAM = `import { createLedger } from 'jobledger';

let handled;
const ran = new Promise((resolve) => (handled = resolve));
const ledger = await createLedger({ databaseUrl: process.env.DATABASE_URL });
const enqueued = await ledger.enqueue({ name: 'greet', args: { to: 'world' }, key: 'tenant:1', limit: 1, jobId: 'greet-1' });
const worker = ledger.worker({ handlers: { greet: async (args, ctx) => handled({ args, jobId: ctx.jobId, key: ctx.key }) }, concurrency: 1 });
worker.start();
const handler = await ran;
// A stop waits for the running handler's end to be recorded.
await worker.stop();
const { jobs } = await ledger.jobs({ key: 'tenant:1' });
await ledger.close();
console.log(JSON.stringify({ from: import.meta.resolve('jobledger'), enqueued, handler, jobs: jobs.map((j) => ({ jobId: j.jobId, status: j.status, attempts: j.attempts })) }));
`;

let db: TestDatabase;
let dir: string;
let packed: { stdout: string; stderr: string };
let tarball: string;
let app: string;

beforeAll(async () => {
  db = await createTestDatabase();
  dir = await mkdtemp(join(tmpdir(), 'jobledger-package-'));
  const source = join(dir, 'source');
  await mkdir(source);
  for (const path of BUILD_INPUTS) await cp(join(REPO, path), join(source, path), { recursive: true });
  await symlink(join(REPO, 'node_modules'), join(source, 'node_modules'), 'dir');
  // --foreground-scripts: the build's own output comes out with npm's, to be looked at.
  packed = await npm(source, 'pack', '--foreground-scripts', '--pack-destination', dir);
  tarball = join(dir, `jobledger-${version}.tgz`);
  app = join(dir, 'app');
  await mkdir(app);
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'jobledger-user', private: true, type: 'module' }));
  await writeFile(join(app, 'main.mjs'), PROGRAM);
  await npm(app, 'install', tarball, '--prefer-offline');
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
  await db?.drop();
});

describe('the package a user installs', () => {
  it("is built by npm pack, quietly: no bundler chunk sizes among the build's lines", () => {
    const output = `${packed.stdout}\n${packed.stderr}`;
    expect(output).toContain(`> jobledger@${version} build`);
    expect(output).not.toMatch(/chunk\s*│\s*size/);
    expect(output).not.toMatch(/Finished in/);
  });

  it('holds the built library and CLI, the README and the LICENSE; no sources, tests, benches or source maps', async () => {
    const { stdout } = await exec('tar', ['-tzf', tarball], { maxBuffer: 8 << 20 });
    const files = stdout.split('\n').filter(Boolean).map((f) => f.replace(/^package\//, ''));
    expect(files).toEqual(
      expect.arrayContaining(['package.json', 'README.md', 'LICENSE', 'dist/src/index.js', 'dist/src/index.d.ts', 'dist/src/eventstoredb.js', 'dist/cli/jobledger.cjs', 'dist/cli/page/index.html', 'dist/src/adapters/http/page/index.html']),
    );
    expect(files.filter((f) => !f.startsWith('dist/src/') && !f.startsWith('dist/cli/') && !['package.json', 'README.md', 'LICENSE'].includes(f))).toEqual([]);
    expect(files.filter((f) => f.endsWith('.map') || f.endsWith('modules.json'))).toEqual([]);
    expect(await readFile(join(app, 'node_modules/jobledger/LICENSE'), 'utf8')).toMatch(/^MIT License\n\nCopyright \(c\) \d{4} jobledger contributors\n/);
  });

  it('imported by a program of its own: a job enqueued under a key of limit 1 is run by a worker and completed', async () => {
    const { stdout } = await exec(process.execPath, ['main.mjs'], { cwd: app, env: { ...process.env, DATABASE_URL: db.url } });
    const result = JSON.parse(stdout) as { from: string; enqueued: unknown; handler: unknown; jobs: unknown };
    expect(fileURLToPath(result.from).startsWith(join(app, 'node_modules', 'jobledger'))).toBe(true);
    expect(result.enqueued).toEqual({ jobId: 'greet-1', status: 'acquired', stream: 'key:tenant:1' });
    expect(result.handler).toEqual({ args: { to: 'world' }, jobId: 'greet-1', key: 'tenant:1' });
    expect(result.jobs).toEqual([{ jobId: 'greet-1', status: 'completed', attempts: 1 }]);
  });

  it('has the jobledger bin: --version, and a listing of that job from the same database', async () => {
    const bin = join(app, 'node_modules', '.bin', 'jobledger');
    expect((await exec(bin, ['--version'])).stdout).toBe(`${version}\n`);
    const { stdout } = await exec(bin, ['jobs', '--key', 'tenant:1'], { env: { ...process.env, DATABASE_URL: db.url, LOG_LEVEL: 'warn' } });
    expect(stdout).toMatch(/greet-1\s*│\s*tenant:1\s*│\s*greet\s*│\s*completed/);
  });
});

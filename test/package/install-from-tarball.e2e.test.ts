import { execFile } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commandsOf, parseMarkdown, simpleCommands } from '../docs/markdown.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

// README.md's "Add it to your app", done as a reader would: its ```sh block's `npm pack` (the
// prepare script builds), the tarball installed into a new project as its `npm install` line says
// (from the npm registry for its dependencies, the cache first), its ```js block saved as main.mjs
// and run with `node main.mjs` against a fresh database; then the package's `jobledger` bin. The
// program is the README's, read at test time, so the two cannot drift. The pack runs on a copy of
// what the build reads (node_modules linked), never on this checkout's dist, which the other tests
// of this run use meanwhile.

const exec = promisify(execFile);
const REPO = fileURLToPath(new URL('../../', import.meta.url));
const SECTION = 'Add it to your app';
/** What the build reads; the rest of the checkout (tests, bench) is not packed. */
const BUILD_INPUTS = ['package.json', 'README.md', 'LICENSE', 'tsconfig.json', 'tsconfig.build.json', 'rolldown.config.ts', 'src'];
const { version } = JSON.parse(await readFile(join(REPO, 'package.json'), 'utf8')) as { version: string };
const TARBALL = `jobledger-${version}.tgz`;

const npm = (cwd: string, ...args: string[]) => exec('npm', [...args, '--no-audit', '--no-fund'], { cwd, maxBuffer: 32 << 20, env: { ...process.env, npm_config_update_notifier: 'false' } });

/**
 * The section's ```sh and ```js blocks, each exactly one. The sh block's commands are what this
 * test knows how to do: `npm pack`, then `npm install <path>/jobledger-<version>.tgz` (and
 * cd, mkdir, git clone, npm init, which its folders stand for); a line of any other kind fails
 * here, since the test would not be doing what the README says.
 */
const readmeSection = () => {
  const readme = parseMarkdown(REPO, 'README.md');
  const lines = readme.text.split('\n');
  const start = lines.indexOf(`## ${SECTION}`);
  if (start < 0) throw new Error(`README.md has no section "## ${SECTION}"`);
  const next = lines.findIndex((l, i) => i > start && l.startsWith('## '));
  const inside = readme.blocks.filter((b) => b.line > start + 1 && (next < 0 || b.line < next + 1));
  const sh = inside.filter((b) => b.lang === 'sh');
  const js = inside.filter((b) => b.lang === 'js');
  if (sh.length !== 1 || js.length !== 1) throw new Error(`README.md "## ${SECTION}" must hold one \`\`\`sh block and one \`\`\`js block (found ${sh.length} and ${js.length})`);
  const steps = commandsOf(sh[0]!).flatMap(({ line, command }) => simpleCommands(command).map((words) => ({ line, words })));
  const kinds = steps.map(({ line, words }) => {
    if (words[0] === 'npm' && words[1] === 'pack') return 'pack';
    if (words[0] === 'npm' && (words[1] === 'install' || words[1] === 'i') && words.slice(2).some((w) => w.endsWith(`/${TARBALL}`) || w === TARBALL)) return 'install';
    if (['cd', 'mkdir'].includes(words[0]!) || (words[0] === 'git' && words[1] === 'clone') || (words[0] === 'npm' && words[1] === 'init')) return 'setup';
    throw new Error(`README.md:${line}: "${words.join(' ')}" is not a step this test replicates (npm pack, npm install …/${TARBALL}, cd, mkdir, git clone, npm init)`);
  });
  const order = kinds.filter((k) => k !== 'setup');
  if (order.join(',') !== 'pack,install') throw new Error(`README.md "## ${SECTION}": its sh block must run npm pack, then npm install …/${TARBALL} (it runs: ${order.join(', ') || 'neither'})`);
  return { program: js[0]!.code };
};

let db: TestDatabase;
let dir: string;
let packed: { stdout: string; stderr: string };
let tarball: string;
let app: string;
let program: string;
let packedAt: number;
let installedAt: number;

beforeAll(async () => {
  ({ program } = readmeSection());
  db = await createTestDatabase();
  dir = await mkdtemp(join(tmpdir(), 'jobledger-package-'));
  const source = join(dir, 'source');
  await mkdir(source);
  for (const path of BUILD_INPUTS) await cp(join(REPO, path), join(source, path), { recursive: true });
  await symlink(join(REPO, 'node_modules'), join(source, 'node_modules'), 'dir');
  packedAt = performance.now();
  // --foreground-scripts: the build's own output comes out with npm's, to be looked at.
  packed = await npm(source, 'pack', '--foreground-scripts', '--pack-destination', dir);
  tarball = join(dir, TARBALL);
  app = join(dir, 'app');
  await mkdir(app);
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'jobledger-user', private: true }));
  await writeFile(join(app, 'main.mjs'), program);
  await npm(app, 'install', tarball, '--prefer-offline');
  installedAt = performance.now();
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

  it("runs the README's program as written: three invoices sent on tenant:acme, and the program ends by itself", async () => {
    // The program must end on its own (a worker or pool left open would keep it running): the timeout fails it.
    const { stdout } = await exec(process.execPath, ['main.mjs'], { cwd: app, timeout: 60_000, env: { ...process.env, DATABASE_URL: db.url } });
    const end = performance.now();
    const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
    console.log(`README "${SECTION}": ${s(end - packedAt)} from npm pack to the program's end (pack and install ${s(installedAt - packedAt)}, node main.mjs ${s(end - installedAt)})`);
    const sent = [...stdout.matchAll(/^invoice (\d+) sent \(tenant:acme, job [0-9a-f-]{36}\)$/gm)].map((m) => Number(m[1]));
    expect(sent.sort(), stdout).toEqual([1, 2, 3]);
  });

  it('has the jobledger bin: --version, and a listing of those jobs from the same database, which ran one at a time', async () => {
    const bin = join(app, 'node_modules', '.bin', 'jobledger');
    expect((await exec(bin, ['--version'])).stdout).toBe(`${version}\n`);
    const { stdout } = await exec(bin, ['jobs', '--key', 'tenant:acme', '--json'], { env: { ...process.env, DATABASE_URL: db.url, LOG_LEVEL: 'warn' } });
    const { jobs } = JSON.parse(stdout) as { jobs: { key: string; name: string; status: string; attempts: number; startedAt: number; finishedAt: number }[] };
    expect(jobs.map(({ key, name, status, attempts }) => ({ key, name, status, attempts }))).toEqual(Array(3).fill({ key: 'tenant:acme', name: 'sendInvoice', status: 'completed', attempts: 1 }));
    // "At most one job of tenant:acme runs at a time", as the program's comment says (concurrency 4 notwithstanding).
    const runs = jobs.map((j) => [j.startedAt, j.finishedAt] as const).sort((a, b) => a[0] - b[0]);
    for (let i = 1; i < runs.length; i++) expect(runs[i]![0]).toBeGreaterThanOrEqual(runs[i - 1]![1]);
  });
});

import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpServer } from '../../src/adapters/http/server.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { cliHelp } from '../../scripts/cli-reference.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { commandsOf, documentationFiles, parseMarkdown, simpleCommands, type Block, type Markdown } from './markdown.js';
import { registeredRoutes } from './routes.js';

// The documentation as a reader meets it, held to the code: README.md and every docs/**/*.md (what
// exists when this runs). Links resolve inside the repository, to a heading that exists; every
// `jobledger …` command line names a command and flags the CLI has, every `npm run X` a script;
// ```js and ```ts blocks typecheck as modules importing the package; ```json parses; ```http names a
// route the server registers, and docs/http.md's route table and metric names are the server's. Each failure names
// file:line; one test per kind, each listing all its failures at once.

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const SCRATCH = join(ROOT, '.scratch', 'docs-blocks');
const README_LIMIT = 12_000;
/** TypeScript's "implicitly has an 'any' type" family. */
const IMPLICIT_ANY = [7005, 7006, 7008, 7018, 7019, 7031, 7034];
/** What .gitignore keeps out of the repository: present on disk here, absent from a clone. */
const IGNORED = readFileSync(join(ROOT, '.gitignore'), 'utf8')
  .split('\n')
  .filter((l) => l.endsWith('/'))
  .map((l) => l.slice(0, -1));

let docs: Markdown[];
let db: MigratedDatabase;
let ledger: Ledger;
let routes: Set<string>;
let help: Map<string, string>;
/** The metric names /metrics gives, without their jobledger_ prefix. */
let metrics: string[];

beforeAll(async () => {
  docs = documentationFiles(ROOT).map((path) => parseMarkdown(ROOT, path));
  help = await cliHelp();
  // The routes of a server as `serve` makes it, over a real ledger (nothing is requested).
  db = await createMigratedDatabase(2);
  ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
  const app = await createHttpServer({ ledger, token: 'docs' });
  routes = registeredRoutes(app);
  const scrape = await app.inject({ method: 'GET', url: '/metrics' });
  metrics = [...scrape.body.matchAll(/^# TYPE jobledger_(\w+) /gm)].map((m) => m[1]!);
  await app.close();
});

afterAll(async () => {
  await ledger?.close();
  await db?.drop();
});

const blocksOf = (langs: readonly string[]): { doc: Markdown; block: Block }[] => docs.flatMap((doc) => doc.blocks.filter((b) => langs.includes(b.lang)).map((block) => ({ doc, block })));

describe('the documentation', () => {
  it('covers README.md and docs/*.md, and README.md stays short', () => {
    expect(docs.map((d) => d.path)).toEqual(expect.arrayContaining(['README.md', 'docs/cli.md', 'docs/http.md']));
    const size = statSync(join(ROOT, 'README.md')).size;
    expect(size, `README.md is ${size} bytes: keep it under ${README_LIMIT} (detail goes to docs/)`).toBeLessThan(README_LIMIT);
  });

  it('links only to files in the repository, and to headings that exist', () => {
    const parsed = new Map(docs.map((d) => [d.path, d]));
    const failures: string[] = [];
    for (const doc of docs) {
      for (const { target, line } of doc.links) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:: not a file of the repository
        const where = `${doc.path}:${line}: ${target}`;
        const [rawPath = '', anchor] = target.split('#', 2);
        const path = decodeURIComponent(rawPath);
        const file = path === '' ? join(ROOT, doc.path) : path.startsWith('/') ? join(ROOT, path) : resolve(ROOT, dirname(doc.path), path);
        const inRepo = relative(ROOT, file);
        if (inRepo.startsWith('..') || isAbsolute(inRepo)) {
          failures.push(`${where}: leaves the repository`);
          continue;
        }
        if (!existsSync(file) || IGNORED.some((dir) => inRepo === dir || inRepo.startsWith(`${dir}/`))) {
          failures.push(`${where}: no such file in the repository`);
          continue;
        }
        if (anchor === undefined || !inRepo.endsWith('.md')) continue;
        const target_ = parsed.get(inRepo) ?? parseMarkdown(ROOT, inRepo);
        parsed.set(inRepo, target_);
        if (!target_.anchors.has(anchor)) failures.push(`${where}: ${inRepo} has no heading #${anchor}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it('runs only jobledger commands and flags the CLI has, and npm scripts package.json has', () => {
    const scripts = Object.keys((JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts);
    const failures: string[] = [];
    let checked = 0;
    for (const { doc, block } of blocksOf(['sh', 'bash', 'shell', 'console'])) {
      for (const { line, command } of commandsOf(block)) {
        for (let words of simpleCommands(command)) {
          const where = `${doc.path}:${line}: ${command}`;
          while (words.length > 0 && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0]!)) words = words.slice(1);
          if (words[0] === 'npm' && (words[1] === 'run' || words[1] === 'run-script')) {
            checked++;
            if (!scripts.includes(words[2] ?? '')) failures.push(`${where}: package.json has no script ${JSON.stringify(words[2] ?? '')}`);
            continue;
          }
          if (words[0] === 'npm' && ['test', 'start'].includes(words[1]!) && !scripts.includes(words[1]!)) failures.push(`${where}: package.json has no script ${words[1]}`);
          // npx [--yes] jobledger[@version] …, node …/jobledger.cjs …, a path to the bin: the CLI all the same.
          if (words[0] === 'npx') words = words.slice(1).filter((w, i) => i > 0 || !w.startsWith('-'));
          if (words[0] === 'node' && /jobledger\.cjs$/.test(words[1] ?? '')) words = words.slice(1);
          if (!/(^|\/)jobledger(\.cjs|@[\w.-]+)?$/.test(words[0] ?? '')) continue;
          checked++;
          const args = words.slice(1, words.includes('--') ? words.indexOf('--') : undefined);
          const name = args.find((w) => !w.startsWith('-'));
          const text = help.get(name ?? '');
          if (text === undefined) {
            failures.push(`${where}: jobledger has no command ${JSON.stringify(name)}`);
            continue;
          }
          for (const flag of args.filter((w) => w.startsWith('--')).map((w) => w.split('=')[0]!)) {
            if (!new RegExp(`(^|[\\s,])${flag}(?![\\w-])`, 'm').test(text)) failures.push(`${where}: jobledger ${name ?? ''} --help has no ${flag}`.replace('  ', ' '));
          }
        }
      }
    }
    expect(failures).toEqual([]);
    expect(checked, 'commands checked (the docs run jobledger and npm)').toBeGreaterThan(0);
  });

  it('has ```js and ```ts blocks that typecheck as modules importing the package', () => {
    const blocks = blocksOf(['js', 'javascript', 'ts', 'typescript']);
    rmSync(SCRATCH, { recursive: true, force: true });
    // A block is a file of its own, in a folder per document; one whose first line is a file's
    // name (`// handlers.mjs`) is written under it, so another block of the document importing
    // './handlers.mjs' finds it.
    const origin = new Map<string, { doc: string; line: number }>();
    for (const { doc, block } of blocks) {
      const named = /^\/\/ ([\w.-]+\.(?:mjs|js|mts|ts))\s*\n/.exec(block.code)?.[1];
      const file = join(SCRATCH, doc.path.replace(/[/.]/g, '_'), named ?? `block-${block.line}.${block.lang.startsWith('t') ? 'ts' : 'mjs'}`);
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, block.code);
      origin.set(file, { doc: doc.path, line: block.line });
    }
    // The project's settings, `jobledger` being this repository's source; JavaScript checked too.
    const config = {
      compilerOptions: {
        target: 'ES2022',
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        lib: ['ES2023'],
        types: ['node'],
        strict: true,
        noUncheckedIndexedAccess: true,
        skipLibCheck: true,
        esModuleInterop: true,
        allowJs: true,
        checkJs: true,
        noEmit: true,
        paths: { jobledger: ['../../src/index.ts'], 'jobledger/eventstoredb': ['../../src/eventstoredb.ts'] },
      },
      include: ['**/*'],
    };
    mkdirSync(SCRATCH, { recursive: true });
    writeFileSync(join(SCRATCH, 'tsconfig.json'), JSON.stringify(config, null, 2));
    if (blocks.length === 0) return;
    const parsed = ts.parseJsonConfigFileContent(config, ts.sys, SCRATCH);
    const program = ts.createProgram(parsed.fileNames, parsed.options);
    // The blocks' own diagnostics only: checking the whole of src/ is `npm run typecheck`'s (and
    // four times slower).
    const failures = program
      .getSourceFiles()
      .filter((file) => origin.has(resolve(file.fileName)))
      .flatMap((file) => [...program.getSyntacticDiagnostics(file), ...program.getSemanticDiagnostics(file)])
      // An untyped parameter is plain JavaScript, not a mistake of the example.
      .filter((d) => !(/\.m?js$/.test(d.file!.fileName) && IMPLICIT_ANY.includes(d.code)))
      .map((d) => {
        const { doc, line } = origin.get(resolve(d.file!.fileName))!;
        const at = d.file!.getLineAndCharacterOfPosition(d.start ?? 0).line;
        return `${doc}:${line + 1 + at}: TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`;
      });
    failures.push(...program.getOptionsDiagnostics().map((d) => `.scratch/docs-blocks/tsconfig.json: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`));
    expect(failures).toEqual([]);
    expect(parsed.fileNames.filter((f) => origin.has(resolve(f)))).toHaveLength(origin.size);
  });

  it('has ```json blocks that parse', () => {
    const failures = blocksOf(['json']).flatMap(({ doc, block }) => {
      try {
        JSON.parse(block.code);
        return [];
      } catch (error) {
        return [`${doc.path}:${block.line}: ${(error as Error).message}`];
      }
    });
    expect(failures).toEqual([]);
  });

  it('has ```http blocks that ask for a route the server registers', () => {
    const failures = blocksOf(['http']).flatMap(({ doc, block }) => {
      const [, method = '', path = ''] = /^([A-Z]+) (\S+)/.exec(block.code) ?? [];
      const route = `${method === 'HEAD' ? 'GET' : method} ${path.split('?')[0]}`;
      return routes.has(route) ? [] : [`${doc.path}:${block.line + 1}: ${JSON.stringify(block.code.split('\n')[0])} is no route of the server`];
    });
    expect(failures).toEqual([]);
  });

  it("docs/http.md's route table lists every route the server registers, and no other", () => {
    const http = docs.find((d) => d.path === 'docs/http.md');
    expect(http, 'docs/http.md').toBeDefined();
    const documented = [...http!.text.matchAll(/^\| (GET|POST|PUT|PATCH|DELETE) \| `([^`]+)` \|/gm)].map((m) => `${m[1]} ${m[2]}`);
    expect(routes.size).toBeGreaterThan(20);
    expect(new Set(documented).size, 'each route once').toBe(documented.length);
    expect([...new Set(documented)].sort()).toEqual([...routes].sort());
  });

  it("docs/http.md names every metric /metrics gives, and no other", () => {
    const text = docs.find((d) => d.path === 'docs/http.md')!.text;
    const section = text.split('\n### GET /metrics\n')[1]?.split('\n## ')[0];
    expect(section, 'docs/http.md "### GET /metrics"').toBeDefined();
    // Each name in a code span; the prefix `jobledger_` (ending in _) is said once, not a metric.
    const named = [...section!.matchAll(/`([a-z][a-z0-9_]*[a-z])`/g)].map((m) => m[1]!);
    expect(metrics.length).toBeGreaterThan(10);
    expect([...new Set(named)].sort()).toEqual([...metrics].sort());
  });
});

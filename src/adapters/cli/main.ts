#!/usr/bin/env node
import './compile-cache.js';
import { existsSync, readFileSync } from 'node:fs';
import { createContext } from './context.js';
import { runCli } from './program.js';

// The package's package.json: two directories up from the shipped bundle (dist/cli/jobledger.cjs),
// four from tsc's output (dist/src/adapters/cli/main.js), which runs it unbundled.
const packageJson = ['../../package.json', '../../../../package.json'].map((path) => new URL(path, import.meta.url)).find((url) => existsSync(url));
const version = (JSON.parse(readFileSync(packageJson!, 'utf8')) as { version: string }).version;

// No top-level await: the bundle is CommonJS (rolldown.config.ts). A command that returned is
// done, worker and serve included (they return after their shutdown): the process exits then,
// once stdout and stderr are flushed, so that nothing an error path left open (a pool's idle
// connection, a heartbeat timer) keeps a refused command running (issue 21).
const ctx = createContext();
void runCli(ctx, version, process.argv).then(async (code) => {
  await ctx.settle?.().catch(() => undefined);
  process.exitCode = code;
  process.stdout.write('', () => process.stderr.write('', () => process.exit()));
});

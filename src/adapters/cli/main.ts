#!/usr/bin/env node
import { existsSync, readFileSync } from 'node:fs';
import { createContext } from './context.js';
import { runCli } from './program.js';

// The package's package.json: two directories up from the shipped bundle (dist/cli/jobledger.cjs),
// four from tsc's output (dist/src/adapters/cli/main.js), which runs it unbundled.
const packageJson = ['../../package.json', '../../../../package.json'].map((path) => new URL(path, import.meta.url)).find((url) => existsSync(url));
const version = (JSON.parse(readFileSync(packageJson!, 'utf8')) as { version: string }).version;

// No top-level await: the bundle is CommonJS (rolldown.config.ts).
void runCli(createContext(), version, process.argv).then((code) => {
  process.exitCode = code;
});

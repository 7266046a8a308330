#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { createContext } from './context.js';
import { runCli } from './program.js';

const version = (JSON.parse(readFileSync(new URL('../../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

process.exitCode = await runCli(createContext(), version, process.argv);

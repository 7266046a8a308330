#!/usr/bin/env node
import { readFileSync } from 'node:fs';
import { CommanderError } from 'commander';
import { RefusedError, UnknownJobError, UnknownKeyError } from '../../domain/errors.js';
import { ValidationError } from '../../domain/values.js';
import { createContext } from './context.js';
import { EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UsageError } from './errors.js';
import { buildProgram } from './program.js';

const version = (JSON.parse(readFileSync(new URL('../../../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

const main = async (): Promise<number> => {
  const ctx = createContext();
  try {
    await buildProgram(ctx, version).parseAsync(process.argv);
    return EXIT_OK;
  } catch (error) {
    if (error instanceof CommanderError) {
      // help and --version end here too, with exit code 0; commander has printed the message
      return error.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    // Input the ledger cannot act on: a bad value, an unknown key or job, an action the key's state refuses.
    if (error instanceof UsageError || error instanceof ValidationError || error instanceof UnknownKeyError || error instanceof UnknownJobError || error instanceof RefusedError) {
      process.stderr.write(`error: ${error.message}\n`);
      return EXIT_USAGE;
    }
    process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
    ctx.logger.debug({ err: error }, 'command failed');
    return EXIT_FAILURE;
  }
};

process.exitCode = await main();

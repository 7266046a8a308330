import { ValidationError } from '../../domain/values.js';

/** A usage or input error: exit code 2, and the message names the flag or argument at fault. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

/**
 * A `.catch` for a ledger call: a ValidationError naming an API field becomes a UsageError naming
 * the flag the user typed (`flagOf` maps the field's top level, `jobIds[0]` -> `jobIds`).
 */
export const asUsage =
  (flagOf: Readonly<Record<string, string>>) =>
  (error: unknown): never => {
    if (error instanceof ValidationError) {
      const top = error.field.split(/[.[]/)[0] ?? error.field;
      throw new UsageError(`${flagOf[top] ?? error.field}: ${error.problem}`);
    }
    throw error;
  };

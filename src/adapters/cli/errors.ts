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
 * the flag the user typed (`flagOf` maps the field's top level, `jobIds[0]` -> `jobIds`), and the
 * place inside the value when it is deeper (`--args (args.a[2])`).
 */
export const asUsage =
  (flagOf: Readonly<Record<string, string>>) =>
  (error: unknown): never => {
    if (error instanceof ValidationError) {
      const top = error.field.split(/[.[]/)[0] ?? error.field;
      const flag = flagOf[top];
      const named = flag === undefined ? error.field : top === error.field ? flag : `${flag} (${error.field})`;
      throw new UsageError(`${named}: ${error.problem}`);
    }
    throw error;
  };

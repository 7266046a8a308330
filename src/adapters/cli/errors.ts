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
 * place inside the value when it is deeper (`--args (args.a[2])`). The domain's values (io-ts) are
 * imported here, not at registration: the ledger call that failed has loaded them already.
 */
export const asUsage =
  (flagOf: Readonly<Record<string, string>>) =>
  async (error: unknown): Promise<never> => {
    const { ValidationError } = await import('../../domain/values.js');
    if (error instanceof ValidationError) {
      const top = error.field.split(/[.[]/)[0] ?? error.field;
      const flag = flagOf[top];
      const named = flag === undefined ? error.field : top === error.field ? flag : `${flag} (${error.field})`;
      throw new UsageError(`${named}: ${error.problem}`);
    }
    throw error;
  };

/** Whether `error` is input the ledger cannot act on (exit 2): a bad value, an unknown key or job, an action the key's state refuses, a queue cap the ledger holds otherwise. */
export const isUsage = async (error: unknown): Promise<boolean> => {
  if (error instanceof UsageError) return true;
  const [{ ValidationError }, { QueueCapConflictError, RefusedError, UnknownJobError, UnknownKeyError }] = await Promise.all([import('../../domain/values.js'), import('../../domain/errors.js')]);
  return error instanceof ValidationError || error instanceof UnknownKeyError || error instanceof UnknownJobError || error instanceof RefusedError || error instanceof QueueCapConflictError;
};

/** A usage or input error: exit code 2, and the message names the flag or argument at fault. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

export const EXIT_OK = 0;
export const EXIT_FAILURE = 1;
export const EXIT_USAGE = 2;

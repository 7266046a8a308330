// Retry delay after a failed attempt: exponential, capped, with "equal jitter" (half fixed,
// half random) so retries of jobs that failed together spread out without ever retrying at once.
export const RETRY_BASE_MS = 1_000;
export const RETRY_CAP_MS = 3_600_000;

/** `attempt` is the attempt that failed (1-based); `jitter` is a number in [0, 1). */
export const retryDelayMs = (attempt: number, jitter: number): number => {
  const exp = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.min(attempt - 1, 30));
  return Math.round(exp / 2 + (exp / 2) * jitter);
};

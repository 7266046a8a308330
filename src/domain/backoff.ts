// Retry delay after a failed attempt: exponential, capped, with "equal jitter" (half fixed,
// half random) so retries of jobs that failed together spread out without ever retrying at once.
export const RETRY_BASE_MS = 1_000;
export const RETRY_CAP_MS = 3_600_000;

/** `attempt` is the attempt that failed (1-based); `jitter` is a number in [0, 1). */
export const retryDelayMs = (attempt: number, jitter: number): number => {
  const exp = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.min(attempt - 1, 30));
  return Math.round(exp / 2 + (exp / 2) * jitter);
};

/**
 * Pause before attempt `attempt` (1-based) of something waiting for an unreachable database:
 * 100 ms doubling to 1 s, with equal jitter, so work resumes within about a second of it answering.
 */
export const reconnectDelayMs = (attempt: number, jitter: number): number => {
  const exp = Math.min(1_000, 100 * 2 ** Math.min(Math.max(attempt, 1) - 1, 4));
  return Math.round(exp / 2 + (exp / 2) * jitter);
};

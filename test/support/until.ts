/** Polls `probe` until `done` holds for its value, failing with `what` and the last value after `timeoutMs`. */
export const until = async <T>(probe: () => Promise<T>, done: (t: T) => boolean, what: string, timeoutMs = 30_000): Promise<T> => {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)?.slice(0, 500)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

import { createHistogram, performance } from 'node:perf_hooks';

export interface EventLoopHolds {
  /** The longest hold and the 99th percentile of the holds (seconds) since the previous take; then forgets them. */
  take(): { readonly maxS: number; readonly p99S: number };
  stop(): void;
}

/**
 * How long this process's event loop was held: a timer every `sampleMs` records how late each of
 * its turns came (a turn held up by a request or a tick that ran long). perf_hooks'
 * monitorEventLoopDelay measures the same natively, but its reset() drops the interval after it,
 * so a hold that began just after a scrape went unseen (tried: a 200 ms block, read as 5 ms).
 */
export const watchEventLoop = (sampleMs: number): EventLoopHolds => {
  const holds = createHistogram();
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    // In microseconds, at least 1 (what the histogram records).
    holds.record(Math.max(1, Math.round((now - last - sampleMs) * 1000)));
    last = now;
  }, sampleMs);
  // It only watches: it keeps no process alive.
  timer.unref();
  return {
    take() {
      // A hold still going on (the turn now due is late) counts too.
      const ongoing = Math.max(0, performance.now() - last - sampleMs) / 1000;
      const [max, p99] = holds.count === 0 ? [0, 0] : [holds.max / 1e6, holds.percentile(99) / 1e6];
      holds.reset();
      return { maxS: Math.max(max, ongoing), p99S: p99 };
    },
    stop: () => clearInterval(timer),
  };
};

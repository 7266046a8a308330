import { PRESENCE_INTERVAL_MS_DEFAULT } from './presence.js';

// What a worker applies to an option it is not given. A module of its own, light (presence.js
// brings node:os alone), so that `jobledger worker --help` states these without loading the worker.

export const WORKER_DEFAULTS = {
  queue: 'default',
  concurrency: 10,
  pollIntervalMs: 1_000,
  graceMs: 10_000,
  handoffSliceMs: 1_000,
  unknownJobs: 'give-back',
  unknownJobDelayMs: 10_000,
  unknownJobDeadAfterMs: 3_600_000,
  presenceIntervalMs: PRESENCE_INTERVAL_MS_DEFAULT,
} as const;

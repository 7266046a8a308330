// Stream names. Keys are free-form strings; the prefixes keep keyed and unkeyed streams apart.
export const KEY_STREAM_PREFIX = 'key:';
export const JOB_STREAM_PREFIX = 'job:';

/** The stream of a concurrency key: every job of the key is recorded here. */
export const keyStream = (key: string): string => KEY_STREAM_PREFIX + key;

/** A job without a concurrency key has a stream of its own and is admitted at once. */
export const jobStream = (jobId: string): string => JOB_STREAM_PREFIX + jobId;

export const streamFor = (key: string | null | undefined, jobId: string): string =>
  key == null ? jobStream(jobId) : keyStream(key);

/** The limit key of a queue's cap (createLedger's `queues`): every job of the queue is under it. */
export const queueCapKey = (queue: string): string => `queue:${queue}`;

/** Whether a stream is a queue cap's (its key's stream is there once the queue has a cap). */
export const isQueueCapStream = (stream: string): boolean => stream.startsWith(`${KEY_STREAM_PREFIX}queue:`);

// The workloads of bench/workloads.bench.ts: plain data, as in the shared peer benchmark's
// lib/workloads.mjs (unkeyed, keyed, hot, latency, keyed-5ms), plus keyed-many and skewed.

export interface Workload {
  readonly name: string;
  readonly description: string;
  readonly jobs: number;
  /** Distinct concurrency keys the jobs use (0: jobs carry no key). */
  readonly keys: number;
  /** At most this many jobs of one key run at once; null without keys. */
  readonly limit: number | null;
  /** Handler duration (0: a no-op handler that records its start and end and returns). */
  readonly jobMs: number;
  readonly processes: number;
  readonly concurrency: number;
  /** The key of job i (0-based). */
  readonly keyOf: (i: number) => string | null;
  /** Further limit keys of job i (stacked limits); none when absent. */
  readonly limitsOf?: (i: number) => readonly { readonly key: string; readonly limit: number }[];
}

/** What the producer enqueues and the handler reports back; `seq` finds lost and duplicated runs. */
export interface BenchJob {
  readonly seq: number;
  readonly key: string | null;
  readonly limit: number | null;
  readonly ms: number;
  readonly limits?: readonly { readonly key: string; readonly limit: number }[];
}

const PROCESSES = 2;
const CONCURRENCY = 8;

// skewed: even seqs go to the few hot keys, odd ones to the many cold keys, so hot and cold jobs
// alternate in enqueue order (and in every enqueueMany chunk).
const SKEW_HOT_KEYS = 4;
const SKEW_COLD_KEYS = 2_000;
const skewedKey = (i: number): string => (i % 2 === 0 ? `hot${(i / 2) % SKEW_HOT_KEYS}` : `cold${((i - 1) / 2) % SKEW_COLD_KEYS}`);

type Definition = Omit<Workload, 'name' | 'processes' | 'concurrency' | 'keyOf'> & { readonly keyOf?: (i: number) => string | null };

// stacked: the keyed workload with every job also under one of a few tenant limit keys, loose
// enough that the key's limit binds most of the time: the cost of holding a slot in two streams.
const STACKED_TENANTS = 10;
const STACKED_TENANT_LIMIT = 40;

// Job i of a uniform workload gets key `k${i % keys}`: keys interleave in enqueue order.
const DEFINITIONS: Readonly<Record<string, Definition>> = {
  unkeyed: { description: '20,000 no-op jobs without a key', jobs: 20_000, keys: 0, limit: null, jobMs: 0 },
  keyed: { description: '20,000 no-op jobs over 200 keys, limit 2', jobs: 20_000, keys: 200, limit: 2, jobMs: 0 },
  hot: { description: '2,000 no-op jobs on one key, limit 1', jobs: 2_000, keys: 1, limit: 1, jobMs: 0 },
  latency: { description: '50 keys x 20 jobs of 5 ms, limit 1', jobs: 1_000, keys: 50, limit: 1, jobMs: 5 },
  'keyed-5ms': { description: '4,000 jobs of 5 ms over 200 keys, limit 2', jobs: 4_000, keys: 200, limit: 2, jobMs: 5 },
  stacked: {
    description: `20,000 no-op jobs over 200 keys, limit 2, each also under one of ${STACKED_TENANTS} tenant limit keys (limit ${STACKED_TENANT_LIMIT})`,
    jobs: 20_000,
    keys: 200,
    limit: 2,
    jobMs: 0,
    limitsOf: (i) => [{ key: `tenant${i % STACKED_TENANTS}`, limit: STACKED_TENANT_LIMIT }],
  },
  'keyed-many': { description: '20,000 no-op jobs over 5,000 keys, limit 2', jobs: 20_000, keys: 5_000, limit: 2, jobMs: 0 },
  skewed: {
    description: `20,000 no-op jobs, half on ${SKEW_HOT_KEYS} hot keys, half over ${SKEW_COLD_KEYS} cold keys, limit 2`,
    jobs: 20_000,
    keys: SKEW_HOT_KEYS + SKEW_COLD_KEYS,
    limit: 2,
    jobMs: 0,
    keyOf: skewedKey,
  },
};

export const WORKLOAD_NAMES: readonly string[] = Object.keys(DEFINITIONS);

/** The workload `name`, with `jobs` in place of its job count when given; throws on an unknown name. */
export const resolveWorkload = (name: string, jobs?: number): Workload => {
  const d = DEFINITIONS[name];
  if (d === undefined) throw new UsageError(`unknown workload '${name}' (known: ${WORKLOAD_NAMES.join(', ')})`);
  const { keyOf, ...figures } = d;
  const keys = d.keys;
  const w: Workload = {
    ...figures,
    name,
    jobs: jobs ?? d.jobs,
    processes: PROCESSES,
    concurrency: CONCURRENCY,
    keyOf: keyOf ?? ((i) => (keys > 0 ? `k${i % keys}` : null)),
  };
  // --jobs may not leave a key without jobs: `keys` (and the figures per key) would be wrong.
  if (w.keys > 0 && new Set(Array.from({ length: w.jobs }, (_, i) => w.keyOf(i))).size !== w.keys) {
    throw new UsageError(`--jobs ${w.jobs} leaves some of the ${w.keys} keys of '${name}' without a job`);
  }
  return w;
};

export const makeJobs = (w: Workload): BenchJob[] =>
  Array.from({ length: w.jobs }, (_, seq) => {
    const key = w.keyOf(seq);
    const limits = w.limitsOf?.(seq);
    return { seq, key, limit: key === null ? null : w.limit, ms: w.jobMs, ...(limits === undefined ? {} : { limits }) };
  });

/** A bad command line: the bench prints it and exits 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

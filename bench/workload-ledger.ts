// How bench/workloads.bench.ts drives jobledger, as the shared peer benchmark's
// systems/jobledger.mjs does: each role opens createLedger({databaseUrl}) (which migrates on open),
// the producer calls enqueueMany() per chunk, each worker process runs
// ledger.worker({handlers, concurrency}).start() (process 0 also ledger.start(), the sweeper).
// Only the public Ledger API; its option types are derived from createLedger and Ledger so that
// this file depends on nothing else in src/.
import { createLedger, type Ledger } from '../src/adapters/ledger.js';
import { UsageError, type BenchJob } from './workload-defs.js';

type LedgerOptions = NonNullable<Parameters<typeof createLedger>[0]>;
type Logger = NonNullable<LedgerOptions['logger']>;
type WorkerOptions = Parameters<Ledger['worker']>[0];
type EnqueueInput = Parameters<Ledger['enqueueMany']>[0][number];

/** Where an --opt goes: createLedger() in every role, ledger.worker(), each enqueue input, or the producer's chunking. */
type Target = 'ledger' | 'worker' | 'enqueue' | 'producer';

// The options systems/jobledger.mjs takes with --opt. Unset ones are not passed: the library's
// defaults apply.
const OPTIONS = {
  concurrency: 'worker',
  handoffSliceMs: 'worker',
  visibilityMs: 'worker',
  graceMs: 'worker',
  pollIntervalMs: 'worker',
  poolSize: 'ledger',
  sweepIntervalMs: 'ledger',
  leaseMs: 'enqueue',
  insertChunk: 'producer',
} as const satisfies Record<string, Target>;

export type OptionName = keyof typeof OPTIONS;
export type BenchOptions = Partial<Record<OptionName, number>>;

/** bench/runtime.bench.ts enqueues in enqueueMany() calls of 1,000; 0 is one call with every job. */
const DEFAULT_INSERT_CHUNK = 1_000;

const isOptionName = (k: string): k is OptionName => Object.hasOwn(OPTIONS, k);

/** `--opt key=value` pairs -> options; throws a UsageError on an unknown key or a value that is not a number. */
export const parseOptions = (pairs: readonly string[]): BenchOptions => {
  const options: BenchOptions = {};
  for (const pair of pairs) {
    const eq = pair.indexOf('=');
    if (eq < 1) throw new UsageError(`--opt expects key=value, got '${pair}'`);
    const key = pair.slice(0, eq);
    const text = pair.slice(eq + 1);
    if (!isOptionName(key)) throw new UsageError(`unknown --opt '${key}' (known: ${Object.keys(OPTIONS).join(', ')})`);
    const value = Number(text);
    if (text.trim() === '' || !Number.isFinite(value)) throw new UsageError(`--opt ${key} expects a number, got '${text}'`);
    options[key] = value;
  }
  const chunk = options.insertChunk;
  if (chunk !== undefined && !(Number.isInteger(chunk) && chunk >= 0)) throw new UsageError('--opt insertChunk must be a whole number (0: every job in one enqueueMany)');
  return options;
};

/** The options given for one target, to spread into that call (so the defaults of the rest apply). */
const given = (options: BenchOptions, target: Target): Partial<Record<OptionName, number>> =>
  Object.fromEntries(Object.entries(options).filter(([k]) => isOptionName(k) && OPTIONS[k] === target));

export type ReportError = (message: string) => void;

/**
 * The library's Logger port reporting only warnings and errors (lease lost, result not recorded,
 * a failed sweep, ...), each as one line: the bench counts them as errors. The rest is dropped:
 * the default logger would write info lines to stderr for every job.
 */
export const reportingLogger = (report: ReportError, bindings: Record<string, unknown> = {}): Logger => {
  const line =
    (level: string) =>
    (first: object | string, message?: string): void => {
      const fields: Record<string, unknown> = typeof first === 'string' ? {} : { ...(first as Record<string, unknown>) };
      const text = typeof first === 'string' ? first : (message ?? '');
      const err = fields.err;
      delete fields.err;
      const extra = Object.entries({ ...bindings, ...fields })
        .map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : String(v)}`)
        .join(' ');
      const cause = err instanceof Error ? `: ${err.stack ?? err.message}` : err === undefined ? '' : `: ${String(err)}`;
      report(`[jobledger ${level}] ${text}${extra ? ` (${extra})` : ''}${cause}`);
    };
  const noop = (): void => undefined;
  return { child: (b) => reportingLogger(report, { ...bindings, ...b }), error: line('error'), warn: line('warn'), info: noop, debug: noop, trace: noop };
};

/** Opens a ledger for one role (install, producer, worker N) with the ledger-level --opt values. */
export const openLedger = (databaseUrl: string, role: string, options: BenchOptions, report: ReportError): Promise<Ledger> =>
  createLedger({ databaseUrl, logger: reportingLogger(report, { role }), ...given(options, 'ledger') });

/** The one job name: the bench's seq, key and ms travel in its args. */
const JOB = 'bench';

interface BenchArgs {
  readonly s: number;
  readonly k: string | null;
  readonly ms: number;
}

/** Enqueues every job in enqueueMany() calls of insertChunk (each one transaction, committed when it resolves). */
export const enqueueAll = async (ledger: Ledger, jobs: readonly BenchJob[], options: BenchOptions): Promise<void> => {
  const extra = given(options, 'enqueue');
  const inputs: EnqueueInput[] = jobs.map((j) => ({
    name: JOB,
    args: { s: j.seq, k: j.key, ms: j.ms } satisfies BenchArgs,
    ...(j.key === null ? {} : { key: j.key, limit: j.limit ?? undefined }),
    ...(j.limits === undefined ? {} : { limits: j.limits }),
    ...extra,
  }));
  const chunk = options.insertChunk ?? DEFAULT_INSERT_CHUNK;
  const size = chunk > 0 ? chunk : Math.max(1, inputs.length);
  for (let i = 0; i < inputs.length; i += size) await ledger.enqueueMany(inputs.slice(i, i + size));
};

/** What the handler is told of each execution. */
export type Execute = (job: { readonly seq: number; readonly key: string | null; readonly ms: number }) => Promise<void>;

/** The worker's options: the bench's one handler, the workload's concurrency, and the worker-level --opt values. */
export const workerOptions = (concurrency: number, options: BenchOptions, execute: Execute, report: ReportError): WorkerOptions => {
  let mismatches = 0;
  const handler = async (args: BenchArgs, ctx: { readonly jobId: string; readonly key: string | null }): Promise<void> => {
    // The key the ledger admitted the job under must be the one it was enqueued with.
    if ((ctx.key ?? null) !== (args.k ?? null) && mismatches++ < 5) report(`job ${ctx.jobId}: ctx.key ${ctx.key} != enqueued key ${args.k}`);
    await execute({ seq: args.s, key: args.k, ms: args.ms });
  };
  return { concurrency, ...given(options, 'worker'), handlers: { [JOB]: handler } };
};

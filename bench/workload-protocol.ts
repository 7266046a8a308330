// The IPC messages between bench/workloads.bench.ts (the parent) and its worker processes
// (bench/workload-worker.ts, started with child_process.fork).
import type { BenchOptions } from './workload-ledger.js';

export type ToWorker =
  | {
      readonly type: 'init';
      readonly databaseUrl: string;
      /** 0 runs the sweeper (ledger.start()) too. */
      readonly processIndex: number;
      /** Where the worker appends its execution records (bench/workload-metrics.ts's recordLine). */
      readonly recordFile: string;
      readonly concurrency: number;
      readonly options: BenchOptions;
    }
  | { readonly type: 'start' }
  | { readonly type: 'stop' };

export type FromWorker =
  | { readonly type: 'ready' }
  | { readonly type: 'started' }
  | { readonly type: 'progress'; readonly executed: number }
  | { readonly type: 'stopped'; readonly executed: number }
  /** A warning or error of the library, or of the worker process itself: the run counts it. */
  | { readonly type: 'error'; readonly message: string }
  /** The worker could not do what it was told (init, start or stop threw); it exits. */
  | { readonly type: 'fatal'; readonly message: string };

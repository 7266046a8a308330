// One worker process of bench/workloads.bench.ts (a port of the shared peer benchmark's
// lib/worker-proc.mjs), started with child_process.fork and driven over IPC (workload-protocol.ts):
//   init  -> open a ledger (createLedger migrates on open), reply ready
//   start -> ledger.worker({handlers, concurrency}).start(); process 0 also ledger.start() (the sweeper)
//   stop  -> worker.stop(), ledger.close(), write the last records, reply stopped, exit
// The handler records seq,key,startNs,endNs,pid per execution; records are appended to a file of
// this process every 250 ms (not kept for the end) so that a crash keeps what had run.
import fs from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Ledger } from '../src/adapters/ledger.js';
import { openLedger, workerOptions, type Execute } from './workload-ledger.js';
import { recordLine } from './workload-metrics.js';
import type { FromWorker, ToWorker } from './workload-protocol.js';

type Init = Extract<ToWorker, { type: 'init' }>;
type Worker = ReturnType<Ledger['worker']>;

interface State {
  readonly init: Init;
  readonly ledger: Ledger;
  worker: Worker | null;
  timers: NodeJS.Timeout[];
}

let state: State | null = null;
let executed = 0;
let buffered: string[] = [];
let reported = 0;

// After the parent has gone, process.send would throw: there is nobody left to tell.
const send = (message: FromWorker, then?: () => void): void => {
  if (process.send && process.connected) process.send(message, () => then?.());
  else then?.();
};

const reportError = (message: string): void => {
  // A flood of one failure would only slow the run down; the first ones say what happened.
  if (reported++ < 20) send({ type: 'error', message: message.slice(0, 2_000) });
};

const describe = (error: unknown): string => (error instanceof Error ? (error.stack ?? error.message) : String(error));

const flush = (): void => {
  if (state === null || buffered.length === 0) return;
  fs.appendFileSync(state.init.recordFile, `${buffered.join('\n')}\n`);
  buffered = [];
};

// Times come from process.hrtime.bigint(), the clock the parent's enqueue timestamps use too.
const execute: Execute = async (job) => {
  const startNs = process.hrtime.bigint();
  if (job.ms > 0) await sleep(job.ms);
  const endNs = process.hrtime.bigint();
  buffered.push(recordLine({ seq: job.seq, key: job.key, startNs, endNs, pid: process.pid }));
  executed++;
};

const init = async (message: Init): Promise<void> => {
  fs.writeFileSync(message.recordFile, '');
  const ledger = await openLedger(message.databaseUrl, `worker ${message.processIndex}`, message.options, reportError);
  state = { init: message, ledger, worker: null, timers: [] };
  send({ type: 'ready' });
};

const start = (s: State): void => {
  s.timers.push(setInterval(flush, 250), setInterval(() => send({ type: 'progress', executed }), 50));
  s.worker = s.ledger.worker(workerOptions(s.init.concurrency, s.init.options, execute, reportError));
  s.worker.start();
  if (s.init.processIndex === 0) s.ledger.start(); // the sweeper, in one process (`jobledger worker --sweeper`)
  send({ type: 'started' });
};

const stop = async (s: State): Promise<void> => {
  // Running handlers get the worker's grace period and record their ends before the last flush.
  await s.worker?.stop();
  await s.ledger.close();
  for (const t of s.timers) clearInterval(t);
  flush();
  send({ type: 'stopped', executed }, () => process.exit(0));
};

const handle = async (message: ToWorker): Promise<void> => {
  if (message.type === 'init') return init(message);
  if (state === null) throw new Error(`'${message.type}' before 'init'`);
  if (message.type === 'start') return start(state);
  return stop(state);
};

process.on('message', (message: ToWorker) => {
  handle(message).catch((error: unknown) => {
    reportError(describe(error));
    try {
      flush();
    } catch {
      // the fatal message below says what went wrong
    }
    send({ type: 'fatal', message: describe(error) }, () => process.exit(1));
  });
});

// Counted as the run's errors rather than crashing the process: the records written so far stay useful.
process.on('unhandledRejection', (error) => reportError(`unhandled rejection: ${describe(error)}`));
process.on('uncaughtException', (error) => reportError(`uncaught exception: ${describe(error)}`));
// The parent is gone (killed, crashed): keep what ran and leave.
process.on('disconnect', () => {
  try {
    flush();
  } finally {
    process.exit(2);
  }
});

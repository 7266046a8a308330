import { randomUUID } from 'node:crypto';
import type { Command } from 'commander';
import { decodeRecorded } from '../../../commands/key-state-loader.js';
import type { KeyEvent } from '../../../domain/events.js';
import { evolve, holders, initialKeyState } from '../../../domain/key-state.js';
import type { JobContext } from '../../worker/define-job.js';
import { keyStream } from '../../../domain/streams.js';
import type { Ledger } from '../../ledger.js';
import { withLedger, type CommandContext } from '../context.js';
import { print, table } from '../output.js';

// `jobledger demo`: a workload with workers and the sweeper in this process. It shows admission,
// parking, promotion, a retry after a failure, a job scheduled for later and a silent holder whose
// lease expires, then what the ledger recorded.

const KEYS = [
  { key: 'tenant:acme', limit: 1 },
  { key: 'tenant:globex', limit: 2 },
  { key: 'api:stripe', limit: 3 },
  { key: 'report:nightly', limit: 1 },
] as const;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

interface Summary {
  key: string;
  limit: number;
  jobs: number;
  largestOverlap: number;
  handoffs: number;
  retries: number;
  longestParkMs: number;
}

/** Folds the whole stream (earlier demo runs included) and counts what happened from `from` on. */
const summarise = (key: string, all: readonly KeyEvent[], from: number): Summary => {
  let state = initialKeyState;
  let largestOverlap = 0;
  const events = all.slice(from);
  for (const [i, e] of all.entries()) {
    state = evolve(state, e);
    if (i < from) continue;
    // Overlap counts jobs a worker is running: holders whose lease was started.
    largestOverlap = Math.max(largestOverlap, holders(state).filter((h) => h.lease?.workerId != null).length);
  }
  const count = (type: KeyEvent['type']) => events.filter((e) => e.type === type).length;
  return {
    key,
    limit: state.limit,
    jobs: count('JobEnqueued'),
    largestOverlap,
    handoffs: count('JobPromoted'),
    retries: count('JobFailed') + count('LeaseExpired'),
    longestParkMs: Math.max(0, ...events.map((e) => (e.type === 'JobPromoted' ? e.data.waitedMs : 0))),
  };
};

const handlers = {
  work: async () => sleep(20 + Math.random() * 60),
  /** Fails its first attempt; the retry, after a backoff, succeeds. */
  flaky: async (_args: unknown, ctx: JobContext) => {
    await sleep(20);
    if (ctx.attempt === 1) throw new Error('flaky: the first attempt fails');
  },
  /** Its first attempt goes silent (its worker sends no heartbeat), so the sweeper reclaims the lease and it is retried. */
  silent: async (_args: unknown, ctx: JobContext) => {
    if (ctx.attempt > 1) return;
    await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve));
  },
};

const runWorkload = async (ledger: Ledger, jobs: number, note: (line: string) => void): Promise<void> => {
  const run = randomUUID().slice(0, 8);
  const inputs = Array.from({ length: jobs }, (_, i) => {
    const { key, limit } = KEYS[i % KEYS.length]!;
    const name = i % 17 === 3 ? 'flaky' : i === 5 ? 'silent' : 'work';
    return {
      name,
      key,
      limit,
      leaseMs: 1_000,
      priority: i % 5 === 0 ? -1 : 0,
      jobId: `${run}-${i}`,
      // the silent job goes to a worker that sends no heartbeat
      ...(name === 'silent' ? { queue: 'no-heartbeat' } : {}),
      ...(i === 7 ? { delayMs: 2_000 } : {}),
    };
  });
  const workers = [
    ledger.worker({ handlers, concurrency: 4 }),
    ledger.worker({ handlers, concurrency: 4 }),
    ledger.worker({ handlers, queue: 'no-heartbeat', concurrency: 2, heartbeat: false }),
  ];
  for (const w of workers) w.start();
  ledger.start();
  const enqueued = await ledger.enqueueMany(inputs, { by: 'demo' });
  note(`enqueued ${jobs} jobs over ${KEYS.length} keys in one transaction: ${['acquired', 'parked', 'scheduled'].map((s) => `${enqueued.filter((e) => e.status === s).length} ${s}`).join(', ')}`);
  const ids = inputs.map((i) => i.jobId);
  const started = Date.now();
  for (;;) {
    await sleep(500);
    const finished = await ledger.finishedJobs(ids);
    note(`  ${finished}/${jobs} jobs finished`);
    if (finished >= jobs || Date.now() - started > 60_000) break;
  }
  await Promise.all(workers.map((w) => w.stop(100)));
};

export const registerDemo = (program: Command, ctx: CommandContext): void => {
  program
    .command('demo')
    .description('run a small workload on the key ledger and show what it recorded')
    .option('--jobs <n>', 'how many jobs', (v) => Number(v), 40)
    .option('--json', 'machine-readable output')
    .action(async (flags: { jobs: number; json?: boolean }) => {
      await withLedger(ctx, async (ledger) => {
        const before = new Map(await Promise.all(KEYS.map(async ({ key }) => [key, (await ledger.store.readStream(keyStream(key))).length] as const)));
        await runWorkload(ledger, flags.jobs, ctx.note);
        const summaries: Summary[] = [];
        const audits = new Map<string, KeyEvent[]>();
        for (const { key } of KEYS) {
          const events = (await ledger.store.readStream(keyStream(key))).map(decodeRecorded);
          summaries.push(summarise(key, events, before.get(key) ?? 0));
          audits.set(key, events.slice(before.get(key) ?? 0));
        }
        const audited = audits.get(KEYS[0].key) ?? [];
        const t0 = audited[0]?.data.at ?? 0;
        print({ json: flags.json === true }, { summaries, audit: { key: KEYS[0].key, events: audited } }, () =>
          [
            table(['key', 'limit', 'jobs', 'largest overlap', 'handoffs', 'retries', 'longest park'], summaries.map((s) => [s.key, s.limit, s.jobs, s.largestOverlap, s.handoffs, s.retries, `${s.longestParkMs} ms`])),
            `\nthe ledger of ${KEYS[0].key}, from the first slot handoff (40 events; \`jobledger state --key ${KEYS[0].key}\` folds it):`,
            table(
              ['+ms', 'event', 'job', 'lease', 'detail'],
              audited.filter((e) => e.type !== 'JobEnqueued' && e.type !== 'JobParked').slice(0, 40).map((e) => {
                const d = e.data as Record<string, unknown>;
                const detail = e.type === 'SlotReleased' ? d.reason : e.type === 'JobPromoted' ? `waited ${d.waitedMs} ms` : e.type === 'JobStarted' ? `${d.workerId}, attempt ${d.attempt}` : e.type === 'JobFailed' ? d.error : e.type === 'KeyLimitSet' ? `limit ${d.limit}` : '';
                return [e.data.at - t0, e.type, d.jobId ?? '', d.leaseId ?? '', detail];
              }),
            ),
          ].join('\n'),
        );
      }, { sweepIntervalMs: 200, poolSize: 10 });
    });
};

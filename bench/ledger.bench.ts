// Measures the key ledger on a real PostgreSQL and prints the figures (never asserts on them).
//
//   npm run bench                      # uses DATABASE_URL, else postgres://postgres@127.0.0.1:5432/postgres
//   BENCH_SECONDS=5 npm run bench      # longer throughput windows
//
// It works in a scratch database on that server and drops it at the end.
import { performance } from 'node:perf_hooks';
import * as E from 'fp-ts/lib/Either.js';
import pg from 'pg';
import { PostgresEventStore } from '../src/adapters/eventstore/postgres/postgres-event-store.js';
import { createLedger, type Ledger } from '../src/adapters/ledger.js';
import { migrate } from '../src/adapters/postgres/migrations.js';
import { PostgresSnapshotStore } from '../src/adapters/postgres/postgres-snapshot-store.js';
import { keyEventId } from '../src/commands/enqueue.js';
import type { JobSpec } from '../src/domain/commands.js';
import { decide } from '../src/domain/decide/index.js';
import type { KeyEvent } from '../src/domain/events.js';
import { KEY_STATE_SCHEMA_VERSION, fold, initialKeyState, type KeyState } from '../src/domain/key-state.js';
import { keyStream } from '../src/domain/streams.js';
import { quantile, quiet, serverName, withScratchDatabase } from './scratch-database.js';

const seconds = Number(process.env.BENCH_SECONDS ?? 3);
const ms = (n: number) => `${n.toFixed(2)} ms`;

const job = (jobId: string): JobSpec => ({ jobId, name: 'bench', args: null, queue: 'default', priority: 0, maxAttempts: 3, runAt: null });

/** Raw appends with an expected revision: `writers` concurrent loops, each on its own streams. */
const appendsPerSecond = async (pool: pg.Pool, writers: number): Promise<number> => {
  const store = new PostgresEventStore(pool);
  const deadline = performance.now() + seconds * 1000;
  const counts = await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      let revision: number | 'no_stream' = 'no_stream';
      let n = 0;
      while (performance.now() < deadline) {
        const result = await store.append(`bench-append-${writers}-${w}`, revision, [{ type: 'Bench', data: { n } }]);
        revision = result.nextExpectedRevision;
        n++;
      }
      return n;
    }),
  );
  return counts.reduce((a, b) => a + b, 0) / seconds;
};

/** Enqueue commands (load, decide, append) per second: `writers` concurrent loops over 50 keys. */
const enqueuesPerSecond = async (url: string, writers: number): Promise<number> => {
  const ledger = await createLedger({ databaseUrl: url, poolSize: writers, migrate: false, logger: quiet });
  const deadline = performance.now() + seconds * 1000;
  const counts = await Promise.all(
    Array.from({ length: writers }, async (_, w) => {
      let n = 0;
      while (performance.now() < deadline) {
        await ledger.enqueue({ name: 'bench', key: `bench-enqueue-${writers}-${(w * 7919 + n) % 50}`, limit: 2, jobId: `e-${writers}-${w}-${n}` });
        n++;
      }
      return n;
    }),
  );
  await ledger.close();
  return counts.reduce((a, b) => a + b, 0) / seconds;
};

/**
 * A key whose stream holds `total` events of finished jobs (enqueue, acquire, start, complete,
 * release), written in appends of ~1000 events, each followed by the snapshot the command layer
 * would have saved there.
 */
const buildLongStream = async (pool: pg.Pool, key: string, total: number): Promise<void> => {
  // the ledger's store: its inline projections must see every event, as they would in production
  const ledger = await createLedger({ pool, migrate: false, logger: quiet });
  const store = ledger.store;
  const snapshots = new PostgresSnapshotStore(pool);
  const stream = keyStream(key);
  let state: KeyState = initialKeyState;
  let revision: number | 'no_stream' = 'no_stream';
  let pending: KeyEvent[] = [];
  let written = 0;
  let now = Date.now() - 86_400_000;
  const run = (command: Parameters<typeof decide>[0]) => {
    const decided = decide(command, state, (now += 5));
    if (E.isLeft(decided)) throw new Error(JSON.stringify(decided.left));
    state = fold(state, decided.right);
    pending.push(...decided.right);
  };
  const flush = async () => {
    if (pending.length === 0) return;
    const result = await store.append(stream, revision, pending.map((e) => ({ type: e.type, data: e.data, ...(keyEventId(stream, e) ? { eventId: keyEventId(stream, e)! } : {}) })));
    revision = result.nextExpectedRevision;
    written += pending.length;
    pending = [];
    await snapshots.save({ stream, revision, schemaVersion: KEY_STATE_SCHEMA_VERSION, state });
  };
  for (let i = 0; written + pending.length < total; i++) {
    const jobId = `${key}-${i}`;
    run({ type: 'Enqueue', limit: 1, job: job(jobId) });
    const leaseId = state.jobs[jobId]!.lease!.leaseId;
    run({ type: 'Start', jobId, leaseId, workerId: 'bench' });
    run({ type: 'Complete', jobId, leaseId });
    if (pending.length >= 1000) await flush();
  }
  await flush();
  await ledger.close();
};

/** Runs the job just enqueued to completion (not measured), so every measured enqueue meets the same small key state. */
const drain = async (ledger: Ledger, key: string, jobId: string) => {
  const { state } = await ledger.keyState(key);
  const leaseId = state.jobs[jobId]?.lease?.leaseId;
  if (leaseId === undefined) throw new Error(`${jobId} was not admitted`);
  await ledger.execute(keyStream(key), { type: 'Start', jobId, leaseId, workerId: 'bench' });
  await ledger.execute(keyStream(key), { type: 'Complete', jobId, leaseId });
};

/**
 * Latency of an enqueue on the key: warm (this process has the key cached: it reads only the
 * delta) and cold (a new process: newest snapshot + the events after it).
 */
const enqueueLatency = async (url: string, key: string, samples: number) => {
  const warm: number[] = [];
  const cold: number[] = [];
  const ledger = await createLedger({ databaseUrl: url, poolSize: 2, migrate: false, logger: quiet });
  await ledger.keyState(key);
  for (let i = 0; i < samples; i++) {
    const t = performance.now();
    await ledger.enqueue({ name: 'bench', key, limit: 1, jobId: `${key}-warm-${i}` });
    warm.push(performance.now() - t);
    await drain(ledger, key, `${key}-warm-${i}`);
  }
  for (let i = 0; i < Math.min(samples, 50); i++) {
    const fresh = await createLedger({ databaseUrl: url, poolSize: 1, migrate: false, logger: quiet });
    await fresh.store.readStream('bench-connect'); // the connection is not what is measured
    const t = performance.now();
    await fresh.enqueue({ name: 'bench', key, limit: 1, jobId: `${key}-cold-${i}` });
    cold.push(performance.now() - t);
    await fresh.close();
    await drain(ledger, key, `${key}-cold-${i}`);
  }
  await ledger.close();
  return { warm: warm.sort((a, b) => a - b), cold: cold.sort((a, b) => a - b) };
};

const main = () =>
  withScratchDatabase('ledger', async (url) => {
    const pool = new pg.Pool({ connectionString: url, max: 16 });
    try {
      await migrate(pool);
      console.log(`jobledger ledger bench — ${serverName} — ${seconds} s windows\n`);

      for (const writers of [1, 8]) {
        console.log(`raw appends (expected revision), ${writers} writer(s): ${(await appendsPerSecond(pool, writers)).toFixed(0)}/s`);
      }
      for (const writers of [1, 8]) {
        console.log(`enqueue commands (load + decide + append) over 50 keys, ${writers} writer(s): ${(await enqueuesPerSecond(url, writers)).toFixed(0)}/s`);
      }

      console.log('\nenqueue latency vs stream length (limit-1 key of finished jobs, snapshot every 1000 events):');
      for (const total of [100, 100_000]) {
        const key = `long-${total}`;
        const t = performance.now();
        await buildLongStream(pool, key, total);
        const built = ((performance.now() - t) / 1000).toFixed(1);
        const { warm, cold } = await enqueueLatency(url, key, 300);
        console.log(
          `  ${String(total).padStart(7)} events (built in ${built} s): warm p50 ${ms(quantile(warm, 0.5))} p99 ${ms(quantile(warm, 0.99))}; ` +
            `cold (new process) p50 ${ms(quantile(cold, 0.5))} p99 ${ms(quantile(cold, 0.99))}`,
        );
      }
    } finally {
      await pool.end();
    }
  });

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});

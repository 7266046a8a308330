import type pg from 'pg';
import { expect } from 'vitest';
import type { Ledger } from '../../src/adapters/ledger.js';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { decodeRecorded } from '../../src/domain/recorded.js';
import type { Command } from '../../src/domain/commands.js';
import { evolve, fold, holders, initialKeyState, jobsIn, parkedInOrder, type KeyState } from '../../src/domain/key-state.js';
import type { RecordedEvent } from '../../src/domain/ports/event-store.js';
import { keyStream } from '../../src/domain/streams.js';

/** What the read models and the folded state must agree on, for one stream. */
export interface KeyView {
  readonly limit: number | null;
  readonly holders: readonly { jobId: string; leaseId: string; acquiredAt: number; expiresAt: number; workerId: string | null }[];
  /** In promotion order. */
  readonly parked: readonly string[];
  readonly scheduled: readonly { jobId: string; runAt: number }[];
  /** Unfinished jobs: status (running = holding and started under its lease) and attempts so far. */
  readonly jobs: Readonly<Record<string, { status: string; attempts: number }>>;
}

const byJob = <T extends { jobId: string }>(a: T, b: T) => (a.jobId < b.jobId ? -1 : a.jobId > b.jobId ? 1 : 0);

export const viewOfState = (state: KeyState, keyed: boolean): KeyView => ({
  limit: keyed && state.limit > 0 ? state.limit : null,
  holders: holders(state)
    .map((j) => ({ jobId: j.jobId, leaseId: j.lease!.leaseId, acquiredAt: j.lease!.acquiredAt, expiresAt: j.lease!.expiresAt, workerId: j.lease!.workerId }))
    .sort(byJob),
  parked: parkedInOrder(state).map((j) => j.jobId),
  scheduled: jobsIn(state, 'scheduled')
    .map((j) => ({ jobId: j.jobId, runAt: j.runAt! }))
    .sort(byJob),
  jobs: Object.fromEntries(
    Object.entries(state.jobs).map(([id, j]) => [id, { status: j.status === 'holding' && j.lease?.workerId != null ? 'running' : j.status, attempts: j.attempts }]),
  ),
});

export const eventsOf = (pool: pg.Pool, stream: string): Promise<RecordedEvent[]> => new PostgresEventStore(pool).readStream(stream);

export const foldedView = async (pool: pg.Pool, stream: string): Promise<KeyView> =>
  viewOfState(fold(initialKeyState, (await eventsOf(pool, stream)).map(decodeRecorded)), stream.startsWith('key:'));

const t = (d: Date | null): number | null => (d === null ? null : d.getTime());

export const readModelView = async (db: pg.Pool | pg.PoolClient, stream: string): Promise<KeyView> => {
  const keys = await db.query(`SELECT concurrency_limit FROM jl_keys WHERE stream = $1`, [stream]);
  const slots = await db.query(`SELECT job_id, lease_id, acquired_at, expires_at, worker_id FROM jl_slots WHERE stream = $1 ORDER BY job_id COLLATE "C"`, [stream]);
  const parked = await db.query(`SELECT job_id FROM jl_parked WHERE stream = $1 ORDER BY priority, seq`, [stream]);
  const scheduled = await db.query(`SELECT job_id, run_at FROM jl_jobs WHERE stream = $1 AND status = 'scheduled' ORDER BY job_id COLLATE "C"`, [stream]);
  const active = await db.query(
    `SELECT job_id, status, attempts FROM jl_jobs WHERE stream = $1 AND status IN ('pending', 'scheduled', 'parked', 'holding', 'running')`,
    [stream],
  );
  return {
    limit: keys.rows[0]?.concurrency_limit ?? null,
    holders: slots.rows.map((r) => ({ jobId: r.job_id, leaseId: r.lease_id, acquiredAt: t(r.acquired_at)!, expiresAt: t(r.expires_at)!, workerId: r.worker_id })),
    parked: parked.rows.map((r) => r.job_id),
    scheduled: scheduled.rows.map((r) => ({ jobId: r.job_id, runAt: t(r.run_at)! })),
    jobs: Object.fromEntries(active.rows.map((r) => [r.job_id, { status: r.status, attempts: r.attempts }])),
  };
};

/** Every stream of the ledger's keys and jobs. */
export const ledgerStreams = async (pool: pg.Pool): Promise<string[]> =>
  (await pool.query<{ stream: string }>(`SELECT stream FROM streams WHERE stream LIKE 'key:%' OR stream LIKE 'job:%' ORDER BY stream`)).rows.map((r) => r.stream);

export const expectReadModelsMatchFold = async (pool: pg.Pool, streams?: readonly string[]): Promise<void> => {
  for (const stream of streams ?? (await ledgerStreams(pool))) {
    expect({ stream, ...(await readModelView(pool, stream)) }).toEqual({ stream, ...(await foldedView(pool, stream)) });
  }
};

/**
 * The messages the dispatcher must have sent: one per admission (SlotAcquired, JobPromoted) of
 * every stream, with the job's name, args and attempt (starts so far + 1) as folded at that point.
 */
export const expectedMessages = async (pool: pg.Pool): Promise<Map<string, unknown>> => {
  const expected = new Map<string, unknown>();
  for (const stream of await ledgerStreams(pool)) {
    let state = initialKeyState;
    const jobs = new Map<string, { name: string; args: unknown; queue: string }>();
    const recordedEvents = await eventsOf(pool, stream);
    // A direct handoff starts an admission in the append that made it: that one gets no message.
    const startedInAppend = new Set(
      recordedEvents.flatMap((r) => {
        const e = decodeRecorded(r);
        return e.type === 'JobStarted' ? [`${r.position.commit}/${e.data.leaseId}`] : [];
      }),
    );
    for (const recorded of recordedEvents) {
      const e = decodeRecorded(recorded);
      state = evolve(state, e);
      if (e.type === 'JobEnqueued') jobs.set(e.data.jobId, { name: e.data.name, args: e.data.args, queue: e.data.queue });
      if ((e.type === 'SlotAcquired' || e.type === 'JobPromoted') && !startedInAppend.has(`${recorded.position.commit}/${e.data.leaseId}`)) {
        const job = jobs.get(e.data.jobId)!;
        expect(expected.has(e.data.leaseId)).toBe(false);
        expected.set(e.data.leaseId, {
          queue: job.queue,
          message: {
            jobId: e.data.jobId,
            key: stream.startsWith('key:') ? stream.slice(4) : null,
            leaseId: e.data.leaseId,
            name: job.name,
            args: job.args,
            attempt: state.jobs[e.data.jobId]!.attempts + 1,
          },
        });
      }
    }
  }
  return expected;
};

export const sentMessages = async (pool: pg.Pool): Promise<{ queue: string; message: { leaseId: string } }[]> =>
  (await pool.query(`SELECT queue, message FROM queue_messages ORDER BY msg_id`)).rows;

/** Exactly one message per admission, each lease once, with the right content. */
export const expectOneMessagePerAdmission = async (pool: pg.Pool): Promise<number> => {
  const expected = await expectedMessages(pool);
  const sent = await sentMessages(pool);
  const leases = sent.map((m) => m.message.leaseId);
  expect(new Set(leases).size).toBe(leases.length);
  expect(new Map(sent.map((m) => [m.message.leaseId, m]))).toEqual(expected);
  return sent.length;
};

/** A seeded PRNG (mulberry32), so a failing random run can be replayed. */
export const prng = (seed: number) => {
  let a = seed >>> 0;
  const next = (): number => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return { next, int: (n: number) => Math.floor(next() * n), pick: <T>(xs: readonly T[]): T | undefined => xs[Math.floor(next() * xs.length)] };
};

/** A clock tests move by hand. */
export const manualClock = (start = Date.UTC(2030, 0, 1)) => {
  let now = start;
  return { now: () => now, advance: (ms: number) => (now += ms), set: (ms: number) => (now = ms) };
};

/**
 * `steps` random commands over `keys` (and some jobs without a key) through the real ledger:
 * enqueues (with priorities, delays, limits), starts, renewals, completions, failures, yields,
 * cancels, discards, limit changes, revocations, lease expiry and due admissions, with the clock
 * moving on. Refused commands (stale leases...) are part of the run.
 */
export const randomRun = async (
  ledger: Ledger,
  clock: ReturnType<typeof manualClock>,
  options: { readonly seed: number; readonly steps: number; readonly keys: readonly string[]; readonly prefix: string },
): Promise<void> => {
  const r = prng(options.seed);
  let n = 0;
  for (let step = 0; step < options.steps; step++) {
    const roll = r.next();
    if (roll < 0.05) {
      await ledger.enqueue({ name: 'solo', args: { step }, jobId: `${options.prefix}-solo-${n++}`, queue: r.pick(['default', 'other'])! });
      continue;
    }
    const key = r.pick(options.keys)!;
    const stream = keyStream(key);
    const { state } = await ledger.keyState(key);
    const held = holders(state);
    const parked = jobsIn(state, 'parked');
    const run = (command: Command) => ledger.execute(stream, command);
    // Some completions and failures hand the freed slot straight to a worker (direct handoff).
    const handOff = () => (r.next() < 0.4 ? { handOffTo: { workerId: `w${r.int(3)}`, queue: r.pick(['default', 'other'])! } } : {});
    if (roll < 0.35 || Object.keys(state.jobs).length === 0) {
      const jobs = Array.from({ length: 1 + r.int(3) }, () => ({
        name: r.pick(['a', 'b'])!,
        args: { n, nested: [n, { x: r.int(10) }] },
        key,
        jobId: `${options.prefix}-${n++}`,
        priority: r.int(3) - 1,
        maxAttempts: 1 + r.int(3),
        queue: r.pick(['default', 'default', 'other'])!,
        ...(r.next() < 0.2 ? { delayMs: r.int(20_000) } : {}),
        ...(r.next() < 0.1 ? { limit: 1 + r.int(3) } : {}),
        ...(r.next() < 0.2 ? { leaseMs: 1_000 + r.int(5_000) } : {}),
      }));
      await ledger.enqueueMany(jobs);
    } else if (roll < 0.55) {
      const job = r.pick(held.filter((j) => j.lease!.workerId === null)) ?? r.pick(held);
      if (job) await run({ type: 'Start', jobId: job.jobId, leaseId: job.lease!.leaseId, workerId: `w${r.int(3)}` });
    } else if (roll < 0.68) {
      const job = r.pick(held);
      if (job) await run({ type: 'Complete', jobId: job.jobId, leaseId: job.lease!.leaseId, ...handOff() });
    } else if (roll < 0.76) {
      const job = r.pick(held);
      if (job) await run({ type: 'Fail', jobId: job.jobId, leaseId: job.lease!.leaseId, error: `boom ${step}`, jitter: r.next(), ...handOff() });
    } else if (roll < 0.8) {
      const job = r.pick(held);
      if (job) await run({ type: 'Yield', jobId: job.jobId, leaseId: job.lease!.leaseId });
    } else if (roll < 0.83) {
      const job = r.pick(held);
      if (job) await run({ type: 'Renew', jobId: job.jobId, leaseId: job.lease!.leaseId });
    } else if (roll < 0.88) {
      clock.advance(r.int(12_000));
      await run({ type: 'ExpireLeases', jitter: r.next() });
    } else if (roll < 0.92) {
      clock.advance(r.int(25_000));
      await run({ type: 'AdmitDue' });
    } else if (roll < 0.94) {
      const job = r.pick(Object.keys(state.jobs));
      if (job) await run({ type: 'Cancel', jobId: job, by: 'ops' });
    } else if (roll < 0.96) {
      const job = r.pick(parked);
      if (job) await run({ type: 'DiscardParked', jobIds: [job.jobId], by: 'ops' });
    } else if (roll < 0.98) {
      await run({ type: 'SetLimit', limit: 1 + r.int(4), by: 'ops' });
    } else {
      const job = r.pick(held);
      if (job) await run({ type: 'RevokeLease', jobId: job.jobId, by: 'ops', jitter: r.next() });
    }
    clock.advance(r.int(500));
  }
};

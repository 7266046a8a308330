import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { expect } from 'vitest';
import type { Ledger } from '../../src/adapters/ledger.js';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { eventsOfRow, rowColumns, type LedgerRow } from '../../src/projections/ledger-rows.js';
import { decodeRecorded } from '../../src/domain/recorded.js';
import type { Command } from '../../src/domain/commands.js';
import { RefusedError } from '../../src/domain/errors.js';
import { apply, draftOf, fold, holders, initialKeyState, jobsIn, parkedInOrder, type Draft, type KeyState } from '../../src/domain/key-state.js';
import { comparePositions, type GlobalPosition, type RecordedEvent } from '../../src/domain/ports/event-store.js';
import { keyStream } from '../../src/domain/streams.js';
import { statement, type Projection } from '../../src/projections/projection.js';
import { READ_MODELS } from '../../src/projections/read-models.js';
import { claimStatement } from '../../src/adapters/queue/job-queue.js';

type Db = Pick<pg.ClientBase, 'query'>;

/** What the read models and the folded state must agree on, for one stream. */
export interface KeyView {
  readonly limit: number | null;
  /** The stream's own holders (a guest's slot is in `guests`). expiresAt: null for an admission no worker has started (it never expires). */
  readonly holders: readonly { jobId: string; leaseId: string; acquiredAt: number; expiresAt: number | null; workerId: string | null }[];
  /** Its own parked jobs and its parked guests, in promotion order (one line). */
  readonly parked: readonly string[];
  readonly scheduled: readonly { jobId: string; runAt: number }[];
  /** Unfinished jobs of its own: status (running = holding and started under its lease) and attempts so far. */
  readonly jobs: Readonly<Record<string, { status: string; attempts: number }>>;
  /** Jobs of other streams under its limit (jl_limit_jobs), by job id. */
  readonly guests: readonly { jobId: string; home: string; status: string; leaseId: string | null; since: number }[];
}

const byJob = <T extends { jobId: string }>(a: T, b: T) => (a.jobId < b.jobId ? -1 : a.jobId > b.jobId ? 1 : 0);

export const viewOfState = (state: KeyState, keyed: boolean): KeyView => {
  const own = (j: { home?: string }) => j.home === undefined;
  return {
    limit: keyed && state.limit > 0 ? state.limit : null,
    holders: holders(state)
      .filter(own)
      .map((j) => ({ jobId: j.jobId, leaseId: j.lease!.leaseId, acquiredAt: j.lease!.acquiredAt, expiresAt: j.lease!.expiresAt, workerId: j.lease!.workerId }))
      .sort(byJob),
    parked: parkedInOrder(state).map((j) => j.jobId),
    scheduled: jobsIn(state, 'scheduled')
      .map((j) => ({ jobId: j.jobId, runAt: j.runAt! }))
      .sort(byJob),
    jobs: Object.fromEntries(
      Object.entries(state.jobs)
        .filter(([, j]) => own(j))
        .map(([id, j]) => [id, { status: j.status === 'holding' && j.lease?.workerId != null ? 'running' : j.status, attempts: j.attempts }]),
    ),
    guests: Object.entries(state.jobs)
      .filter(([, j]) => !own(j))
      .map(([jobId, j]) => ({ jobId, home: j.home!, status: j.status, leaseId: j.lease?.leaseId ?? null, since: j.lease?.acquiredAt ?? j.parkedAt! }))
      .sort(byJob),
  };
};

export const eventsOf = (pool: pg.Pool, stream: string): Promise<RecordedEvent[]> => new PostgresEventStore(pool).readStream(stream);

export const foldedView = async (pool: pg.Pool, stream: string): Promise<KeyView> =>
  viewOfState(fold(initialKeyState, (await eventsOf(pool, stream)).map(decodeRecorded)), stream.startsWith('key:'));

const t = (d: Date | null): number | null => (d === null ? null : d.getTime());

/** The read models of one stream, as a KeyView. Scheduled jobs are those with run_at set (what jl_jobs_due and jl_jobs_scheduled index). */
export const readModelView = async (db: Db, stream: string): Promise<KeyView> => {
  const keys = await db.query(`SELECT concurrency_limit FROM jl_keys WHERE stream = $1`, [stream]);
  const slots = await db.query(`SELECT job_id, lease_id, acquired_at, expires_at, worker_id FROM jl_slots WHERE stream = $1 ORDER BY job_id COLLATE "C"`, [stream]);
  const parked = await db.query(
    `SELECT job_id FROM (SELECT job_id, priority, seq FROM jl_parked WHERE stream = $1
                         UNION ALL SELECT job_id, priority, seq FROM jl_limit_jobs WHERE stream = $1 AND status = 'parked') p
     ORDER BY priority, seq`,
    [stream],
  );
  const scheduled = await db.query(`SELECT job_id, run_at FROM jl_jobs WHERE stream = $1 AND run_at IS NOT NULL ORDER BY job_id COLLATE "C"`, [stream]);
  const active = await db.query(
    `SELECT job_id, status, attempts FROM jl_jobs WHERE stream = $1 AND status IN ('pending', 'scheduled', 'parked', 'holding', 'running')`,
    [stream],
  );
  const guests = await db.query(`SELECT job_id, home, status, lease_id, since FROM jl_limit_jobs WHERE stream = $1 ORDER BY job_id COLLATE "C"`, [stream]);
  return {
    limit: keys.rows[0]?.concurrency_limit ?? null,
    holders: slots.rows.map((r) => ({ jobId: r.job_id, leaseId: r.lease_id, acquiredAt: t(r.acquired_at)!, expiresAt: t(r.expires_at), workerId: r.worker_id })),
    parked: parked.rows.map((r) => r.job_id),
    scheduled: scheduled.rows.map((r) => ({ jobId: r.job_id, runAt: t(r.run_at)! })),
    jobs: Object.fromEntries(active.rows.map((r) => [r.job_id, { status: r.status, attempts: r.attempts }])),
    guests: guests.rows.map((r) => ({ jobId: r.job_id, home: r.home, status: r.status, leaseId: r.lease_id, since: t(r.since)! })),
  };
};

/** Every stream of the ledger's keys and jobs. */
export const ledgerStreams = async (pool: Db): Promise<string[]> =>
  (await pool.query<{ stream: string }>(`SELECT DISTINCT stream FROM ledger_appends WHERE stream LIKE 'key:%' OR stream LIKE 'job:%' ORDER BY stream`)).rows.map((r) => r.stream);

export const expectReadModelsMatchFold = async (pool: pg.Pool, streams?: readonly string[]): Promise<void> => {
  for (const stream of streams ?? (await ledgerStreams(pool))) {
    expect({ stream, ...(await readModelView(pool, stream)) }).toEqual({ stream, ...(await foldedView(pool, stream)) });
  }
};

/** The read-model tables and their primary keys, in write order. */
export const READ_MODEL_KEYS = [
  ['jl_keys', 'stream'],
  ['jl_jobs', 'job_id'],
  ['jl_limit_jobs', 'stream, job_id'],
] as const;

/** Every row of the read models (and their views jl_slots, jl_parked, jl_key_stats), in primary-key order. */
export const readModelRows = async (db: Db): Promise<Record<string, unknown[]>> => {
  const out: Record<string, unknown[]> = {};
  for (const [table, pk] of [...READ_MODEL_KEYS, ['jl_slots', 'job_id'], ['jl_parked', 'job_id'], ['jl_key_stats', 'stream']]) {
    out[table] = (await db.query(`SELECT * FROM ${table} ORDER BY ${pk} COLLATE "C"`)).rows;
  }
  return out;
};

/** Every event of the ledger's streams, in global order. */
export const ledgerEvents = async (db: Db): Promise<RecordedEvent[]> =>
  (
    await db.query<LedgerRow>(`SELECT ${rowColumns('a')} FROM appends a WHERE stream LIKE 'key:%' OR stream LIKE 'job:%' ORDER BY transaction_id, position`)
  ).rows.flatMap((row) => eventsOfRow(row));

// ---------------------------------------------------------------------------------------------
// The dispatcher, and what a worker's read can claim

/**
 * One batch the dispatcher applied (async mode), as recordDispatchBatches saw it in the batch's
 * transaction: the writing transaction of its last event, and the read models' checkpoint then.
 */
export interface DispatchBatch {
  readonly first: bigint;
  readonly last: bigint;
  readonly readModels: bigint | null;
}

export const DISPATCH_BATCHES_TABLE = `CREATE TABLE IF NOT EXISTS test_dispatch_batches (n bigserial PRIMARY KEY, first numeric NOT NULL, last numeric NOT NULL, read_models numeric)`;

/**
 * The projection (the dispatcher) with one more statement per batch, in the batch's transaction:
 * the batch's first and last transaction and the checkpoint of `followed` at the end of it, in
 * test_dispatch_batches (create it with DISPATCH_BATCHES_TABLE). A batch that rolls back leaves
 * no row.
 */
export const recordDispatchBatches = (projection: Projection, followed = READ_MODELS): Projection => ({
  ...projection,
  project: (events) => [
    ...projection.project(events),
    statement(
      `INSERT INTO test_dispatch_batches (first, last, read_models) SELECT $1::numeric, $2::numeric, (SELECT commit FROM projection_checkpoints WHERE projection = $3)`,
      events[0]!.commit.toString(),
      events.at(-1)!.commit.toString(),
      followed,
    ),
  ],
});

export const dispatchBatches = async (db: Db): Promise<DispatchBatch[]> =>
  (await db.query<{ first: string; last: string; read_models: string | null }>(`SELECT first::text, last::text, read_models::text FROM test_dispatch_batches ORDER BY n`)).rows.map(
    (r) => ({ first: BigInt(r.first), last: BigInt(r.last), readModels: r.read_models === null ? null : BigInt(r.read_models) }),
  );

/**
 * What a worker's read can claim (CLAIM_SQL, on every queue) is exactly the admitted jobs no
 * worker has started, as each stream's fold says, with what their worker needs: name and args
 * (its JobEnqueued), attempt = starts so far + 1, its lease. Each job once: one row per job, so
 * one message per admission. Run once the read models are at the ledger (inline: always; async:
 * when the runners caught up), or at `upTo` (the read models' checkpoint). Returns how many.
 */
export const expectClaimableMatchFold = async (pool: pg.Pool, options: { readonly upTo?: GlobalPosition } = {}): Promise<number> => {
  const states = new Map<string, Draft>();
  const enqueued = new Map<string, { name: string; args: unknown; queue: string }>();
  const { upTo } = options;
  for (const r of await ledgerEvents(pool)) {
    if (upTo !== undefined && comparePositions(r.position, upTo) > 0) break;
    const e = decodeRecorded(r);
    let state = states.get(r.stream);
    if (state === undefined) states.set(r.stream, (state = draftOf(initialKeyState)));
    apply(state, e);
    if (e.type === 'JobEnqueued') enqueued.set(e.data.jobId, { name: e.data.name, args: e.data.args ?? null, queue: e.data.queue });
  }
  const expected: Record<string, unknown>[] = [];
  for (const [stream, state] of states) {
    for (const job of holders(state as unknown as KeyState)) {
      if (job.home !== undefined || job.lease!.workerId !== null) continue;
      const { name, args, queue } = enqueued.get(job.jobId)!;
      expected.push({ queue, jobId: job.jobId, key: stream.startsWith('key:') ? stream.slice(4) : null, stream, leaseId: job.lease!.leaseId, name, args, attempt: job.attempts + 1, leaseMs: job.leaseMs });
    }
  }
  const client = await pool.connect();
  const actual: Record<string, unknown>[] = [];
  try {
    await client.query('BEGIN');
    const { rows: queues } = await client.query<{ queue: string }>(`SELECT DISTINCT queue FROM jl_jobs WHERE status = 'holding'`);
    for (const { queue } of queues) {
      const claim = claimStatement({ queue, qty: 1_000_000, skipStreams: [], skipJobs: [] });
      actual.push(...(await client.query(claim.text, claim.values as unknown[])).rows.map((row) => ({ queue, ...row })));
    }
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
  const byJob = (a: Record<string, unknown>, b: Record<string, unknown>) => String(a.jobId).localeCompare(String(b.jobId));
  expect(actual.sort(byJob)).toEqual(expected.sort(byJob));
  return actual.length;
};

// ---------------------------------------------------------------------------------------------
// Random ledgers

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
 * enqueues (with priorities, delays, limits, full-key policies), starts, renewals, completions,
 * failures, yields, cancels, discards, limit changes, pauses and resumes, revocations, lease expiry
 * and due admissions, with the clock moving on. Refused commands (stale leases...) are part of the run. With `limitKeys` (keys of their own, limit 2, never
 * among `keys`), some jobs are also under one or two of them (enqueue `limits`); commands go to
 * a job's home, so a key's guests are never picked for them.
 */
export const randomRun = async (
  ledger: Ledger,
  clock: ReturnType<typeof manualClock>,
  options: { readonly seed: number; readonly steps: number; readonly keys: readonly string[]; readonly prefix: string; readonly limitKeys?: readonly string[] },
): Promise<void> => {
  const r = prng(options.seed);
  let n = 0;
  for (let step = 0; step < options.steps; step++) {
    // The writer's follow-ups (FillSlots) of the last step are written first: each step then sees
    // the same state whatever the pace of the machine, so a seed always makes the same run.
    await ledger.drain();
    if (step % 20 === 19) {
      // A dead job of a key run again, or dropped for good, as an operator would (no draw: the rest of the run keeps its seed's choices).
      const key = options.keys[Math.floor(step / 20) % options.keys.length]!;
      const dead = (await ledger.jobs({ key, status: 'dead', limit: 1 })).jobs[0]?.jobId;
      // The list may lag the ledger (async projections): a job retried or discarded since is refused, as it would be an operator.
      const act = dead === undefined ? undefined : step % 40 === 39 ? ledger.discardDead({ jobIds: [dead], by: 'ops' }) : ledger.retry({ jobIds: [dead], by: 'ops' });
      await act?.catch((error: unknown) => {
        if (!(error instanceof RefusedError && error.error.tag === 'NotDead')) throw error;
      });
    }
    const roll = r.next();
    if (roll < 0.05) {
      await ledger.enqueue({ name: 'solo', args: { step }, jobId: `${options.prefix}-solo-${n++}`, queue: r.pick(['default', 'other'])! });
      continue;
    }
    const key = r.pick(options.keys)!;
    const stream = keyStream(key);
    const { state } = await ledger.keyState(key);
    const own = (j: { home?: string }) => j.home === undefined;
    const held = holders(state).filter(own);
    const parked = jobsIn(state, 'parked').filter(own);
    const limitKeys = options.limitKeys ?? [];
    const limits = () => {
      if (limitKeys.length === 0 || r.next() < 0.6) return {};
      const picked = [...new Set([r.pick(limitKeys)!, ...(r.next() < 0.3 ? [r.pick(limitKeys)!] : [])])];
      return { limits: picked.map((k) => ({ key: k, limit: 2 })) };
    };
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
        // Owning the limit: a later enqueue may change it (one that does not is refused; see key-rules.int.test.ts).
        ...(r.next() < 0.1 ? { limit: 1 + r.int(3), ownsLimit: true } : {}),
        ...(r.next() < 0.2 ? { leaseMs: 1_000 + r.int(5_000) } : {}),
        ...(r.next() < 0.15 ? { whenFull: r.pick(['reject', 'replace'] as const)! } : {}),
        ...limits(),
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
      const job = r.pick(Object.keys(state.jobs).filter((id) => own(state.jobs[id]!)));
      if (job) await run({ type: 'Cancel', jobId: job, by: 'ops' });
    } else if (roll < 0.96) {
      const job = r.pick(parked);
      if (job) await run({ type: 'DiscardParked', jobIds: [job.jobId], by: 'ops' });
    } else if (roll < 0.975) {
      await run({ type: 'SetLimit', limit: 1 + r.int(4), by: 'ops' });
    } else if (roll < 0.995) {
      await run(state.paused === undefined ? { type: 'PauseKey', by: 'ops', reason: 'maintenance' } : { type: 'ResumeKey', by: 'ops' });
    } else {
      const job = r.pick(held);
      if (job) await run({ type: 'RevokeLease', jobId: job.jobId, by: 'ops', jitter: r.next() });
      // A running job's handler stops, and its worker says so (else its revoked lease ends by lapsing). No draw: a seed's later choices stay its own.
      const revoked = job?.lease?.workerId != null && step % 3 !== 0 ? job : undefined;
      if (revoked) await run({ type: 'Stopped', jobId: revoked.jobId, leaseId: revoked.lease!.leaseId, jitter: 0.5 });
    }
    clock.advance(r.int(500));
  }
  // The last step's follow-ups too: what the caller reads next is the run's whole ledger.
  await ledger.drain();
};

// ---------------------------------------------------------------------------------------------
// Small helpers

export const waitFor = async (what: string, check: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> => {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
};

export const count = async (db: Db, sql: string, values: unknown[] = []): Promise<number> => Number((await db.query(sql, values)).rows[0].n);

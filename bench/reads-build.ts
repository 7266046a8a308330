// One part of bench:reads' ledger (see bench/reads-ledger.ts), in a process of its own:
//
//   node dist/bench/reads-build.js big|capped|ordinary full|quick <database url>
//
// Prints its progress and then its result on stdout, one JSON object a line (PartLine).
import * as E from 'fp-ts/lib/Either.js';
import pg from 'pg';
import { createLedger, keyStream, type CommandResult, type KeyCommand, type Ledger } from '../src/index.js';
import { BIG_KEY, CAP, CAPPED_QUEUE, ORDINARY_PREFIX, RENEW_JOB, RENEW_KEY, SCALES, ordinaryEvents, type PartLine, type Scale, type Subjects } from './reads-ledger.js';
import { quiet } from './scratch-database.js';

const say = (line: PartLine) => process.stdout.write(`${JSON.stringify(line)}\n`);

/** Progress, at most twice a second. */
const progressOf = (part: string, of: number, unit: string) => {
  let shown = 0;
  return (done: number) => {
    if (Date.now() - shown < 500 && done < of) return;
    shown = Date.now();
    say({ part, done, of, unit });
  };
};

const ENQUEUE_CHUNK = 1_000;
const WORKER = 'bench-reads';

/** The decisions, each of which must have been taken: the ledger built is the one described. */
const decided = (results: readonly CommandResult[], what: string) =>
  results.map((r) => {
    if (E.isLeft(r)) throw new Error(`${what} refused: ${JSON.stringify(r.left)}`);
    return r.right;
  });

/** The lease of the key's one holder. */
const holderOf = async (ledger: Ledger, key: string): Promise<{ jobId: string; leaseId: string }> => {
  const { state } = await ledger.keyState(key);
  const [jobId, job] = Object.entries(state.jobs).find(([, j]) => j.lease !== null) ?? [];
  if (jobId === undefined || job?.lease == null) throw new Error(`${key} has no holder`);
  return { jobId, leaseId: job.lease.leaseId };
};

/**
 * bench/big: 100 jobs arrive whenever fewer than 20 wait, and each job is completed with a direct
 * handoff to the next (its JobStarted in the same append, as a worker's), until what is left of
 * bigEvents is the line's drain and the bigParked arrivals at the end.
 */
const bigKey = async (ledger: Ledger, scale: Scale, progress: (events: number) => void): Promise<Pick<Subjects, 'bigKey' | 'bigParkedJob' | 'midBuildAt'>> => {
  const stream = keyStream(BIG_KEY);
  let next = 0;
  let parked = 0;
  // KeyLimitSet, at the first arrival.
  let events = 1;
  let midBuildAt: number | undefined;
  const arrive = async (count: number) => {
    const jobs = Array.from({ length: count }, () => ({ name: 'big', key: BIG_KEY, limit: 1, queue: 'big', jobId: `big-${next++}` }));
    for (let i = 0; i < jobs.length; i += ENQUEUE_CHUNK) await ledger.enqueueMany(jobs.slice(i, i + ENQUEUE_CHUNK));
    events += 2 * count;
  };
  // The final arrivals: one takes the free slot (unstarted: it never expires), the rest park.
  const atEnd = 2 * (scale.bigParked + 1);
  await arrive(100);
  parked = 99;
  let holder = await holderOf(ledger, BIG_KEY);
  decided([await ledger.execute(stream, { type: 'Start', jobId: holder.jobId, leaseId: holder.leaseId, workerId: WORKER })], 'Start');
  events += 1;
  for (;;) {
    // A job's arrival and park (2 events) and its completion with a handoff (4).
    const room = scale.bigEvents - events - 4 * parked - 2 - atEnd;
    if (parked < 20 && room >= 6) {
      const count = Math.min(100, Math.floor(room / 6));
      await arrive(count);
      parked += count;
    }
    const last = parked === 0;
    const [done] = decided([await ledger.execute(stream, { type: 'Complete', jobId: holder.jobId, leaseId: holder.leaseId, ...(last ? {} : { handOffTo: { workerId: WORKER, queue: 'big' } }) })], 'Complete');
    events = (done!.revision as number) + 1;
    if (midBuildAt === undefined && events >= scale.bigEvents / 2) midBuildAt = Date.now();
    progress(events);
    if (last) break;
    const promoted = done!.events.find((e) => e.type === 'JobPromoted');
    if (promoted?.type !== 'JobPromoted') throw new Error('a completion with a parked job promoted none');
    holder = { jobId: promoted.data.jobId, leaseId: promoted.data.leaseId };
    parked -= 1;
  }
  await arrive(scale.bigParked + 1);
  progress(events);
  return { bigKey: BIG_KEY, bigParkedJob: `big-${next - 1}`, midBuildAt: midBuildAt ?? Date.now() };
};

/** bench/renewer: one job, started, renewed `renewals` times one append each, completed. */
const renewer = async (ledger: Ledger, scale: Scale): Promise<Pick<Subjects, 'renewJob'>> => {
  const stream = keyStream(RENEW_KEY);
  await ledger.enqueue({ name: 'renewer', key: RENEW_KEY, limit: 1, jobId: RENEW_JOB });
  const { leaseId } = await holderOf(ledger, RENEW_KEY);
  const lease = { jobId: RENEW_JOB, leaseId };
  decided([await ledger.execute(stream, { type: 'Start', ...lease, workerId: WORKER })], 'Start');
  for (let i = 0; i < scale.renewals; i++) decided([await ledger.execute(stream, { type: 'Renew', ...lease })], 'Renew');
  decided([await ledger.execute(stream, { type: 'Complete', ...lease })], 'Complete');
  return { renewJob: RENEW_JOB };
};

/** The capped queue's jobs, 1,000 an enqueue: CAP take its slots, the others wait in its line. */
const capped = async (ledger: Ledger, scale: Scale, progress: (jobs: number) => void): Promise<Pick<Subjects, 'cappedJob'>> => {
  for (let i = 0; i < scale.cappedJobs; i += ENQUEUE_CHUNK) {
    const count = Math.min(ENQUEUE_CHUNK, scale.cappedJobs - i);
    await ledger.enqueueMany(Array.from({ length: count }, (_, j) => ({ name: 'capped', queue: CAPPED_QUEUE, jobId: `capped-${i + j}` })));
    progress(i + count);
  }
  return { cappedJob: `capped-${scale.cappedJobs - 1}` };
};

/** The ordinary keys' streams, key:o/…: from key:o/ up to key:o0 ('0' follows '/'). */
const ORDINARY_STREAMS = [keyStream(ORDINARY_PREFIX), keyStream('o0')];

/** Ordinary jobs that fail on their only attempt (dead): one in DEAD_EVERY. */
const DEAD_EVERY = 97;
const ORDINARY_CHUNK = 2_000;

/**
 * The ordinary keys' traffic: 2,000 jobs arrive (four a key, limit 2: two take its slots, two
 * park), then every unstarted holder of them is started and completed (or failed), round after
 * round, until none is left; until the ordinary keys hold their share of the ledger's events.
 */
const ordinary = async (ledger: Ledger, pool: pg.Pool, scale: Scale, progress: (events: number) => void): Promise<Pick<Subjects, 'ordinaryKey'>> => {
  const target = ordinaryEvents(scale);
  const count = (results: readonly CommandResult[]) => decided(results, 'ordinary').reduce((n, d) => n + d.events.length, 0);
  let events = 0;
  for (let n = 0; events < target; n += ORDINARY_CHUNK) {
    const jobs = Array.from({ length: ORDINARY_CHUNK }, (_, i) => {
      const k = Math.floor((n + i) / 4);
      return { name: 'ordinary', key: `${ORDINARY_PREFIX}${k % scale.ordinaryKeys}`, limit: 2, jobId: `o-${n + i}`, args: { n: n + i }, ...((n + i) % DEAD_EVERY === 0 ? { maxAttempts: 1 } : {}) };
    });
    // Two clients of the writer at once: the chunks are one transaction each, on keys of their own.
    await Promise.all([0, 1].map((half) => ledger.enqueueMany(jobs.slice(half * (ORDINARY_CHUNK / 2), (half + 1) * (ORDINARY_CHUNK / 2)))));
    // Each job's arrival and admission, and each key's limit at its first arrival.
    events += 2 * ORDINARY_CHUNK + (n < 4 * scale.ordinaryKeys ? ORDINARY_CHUNK / 4 : 0);
    for (;;) {
      const { rows } = await pool.query<{ stream: string; job_id: string; lease_id: string }>(`SELECT stream, job_id, lease_id FROM jl_slots WHERE worker_id IS NULL AND stream >= $1 AND stream < $2`, ORDINARY_STREAMS);
      if (rows.length === 0) break;
      const lease = (r: (typeof rows)[number]) => ({ jobId: r.job_id, leaseId: r.lease_id });
      events += count(await ledger.executeMany(rows.map((r) => ({ stream: r.stream, command: { type: 'Start', ...lease(r), workerId: WORKER } }))));
      const ends = rows.map((r): KeyCommand => {
        const dies = Number(r.job_id.slice(2)) % DEAD_EVERY === 0;
        return { stream: r.stream, command: dies ? { type: 'Fail', ...lease(r), error: 'bench: fails on its only attempt', jitter: 0.5 } : { type: 'Complete', ...lease(r) } };
      });
      events += count(await ledger.executeMany(ends));
    }
    progress(events);
  }
  const { rows } = await pool.query<{ key: string }>(
    `SELECT k.key FROM jl_keys k WHERE k.key LIKE $1 AND NOT EXISTS (SELECT 1 FROM jl_jobs j WHERE j.key = k.key AND j.status = 'dead') ORDER BY k.key LIMIT 1`,
    [`${ORDINARY_PREFIX}%`],
  );
  return { ordinaryKey: rows[0]!.key };
};

const main = async () => {
  const [part, scaleName, url] = process.argv.slice(2);
  const scale = SCALES[scaleName as Scale['name']];
  if (part === undefined || scale === undefined || url === undefined) throw new Error('usage: reads-build.js big|capped|ordinary full|quick <database url>');
  const pool = new pg.Pool({ connectionString: url, max: 3, pipeline: true } as pg.PoolConfig);
  pool.on('error', () => undefined);
  const ledger = await createLedger({ pool, logger: quiet, migrate: false, ...(part === 'capped' ? { queues: { [CAPPED_QUEUE]: { maxConcurrent: CAP } } } : {}) });
  try {
    let result: Partial<Subjects>;
    if (part === 'big') {
      const [big, renewed] = await Promise.all([bigKey(ledger, scale, progressOf(part, scale.bigEvents, 'events')), renewer(ledger, scale)]);
      result = { ...big, ...renewed };
    } else if (part === 'capped') result = await capped(ledger, scale, progressOf(part, scale.cappedJobs, 'jobs'));
    else if (part === 'ordinary') result = await ordinary(ledger, pool, scale, progressOf(part, ordinaryEvents(scale), 'events'));
    else throw new Error(`no part ${part}`);
    say({ part, result });
  } finally {
    await ledger.close();
    await pool.end();
  }
};

await main();

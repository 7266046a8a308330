import type pg from 'pg';
import type { KeyEvent } from '../../src/domain/events.js';
import { fold, initialKeyState, type KeyState } from '../../src/domain/key-state.js';
import { decodeRecorded } from '../../src/domain/recorded.js';
import { KEY_STREAM_PREFIX, keyStream, queueCapKey } from '../../src/domain/streams.js';
import { limitLine } from '../../src/adapters/postgres/queries/limit-line.js';
import { lineOf, type LimitLine } from '../../src/domain/explain.js';
import { shownLine } from '../support/limit-line.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { verify } from '../../src/projections/verify.js';

// What a model run must never show (issue 21; DESIGN.md invariants 1-10), judged from the
// handlers' own records and the ledger alone, never from what the code under test says of itself:
// - limit: at no moment did more handlers of a key, of a stacked limit key or of a capped queue
//   run than its limit (by the world's limits, not the recorded ones). A handler counts until it
//   returns, or until its lease lapsed (LeaseExpired: its worker was silent a whole lease, and
//   the slot passing on then is what a lease is for);
// - twice: no job ran twice at once, and no job whose handler completed ran again, unless that
//   run's lease lapsed under a worker that renews nothing;
// - rejected: every JobRejected was right when it committed: one of the job's limits had no room
//   in the streams as they stood below the rejecting transaction;
// - discarded: a dead job discarded is never retried;
// - stranded (with the sweepers stopped and the ledger quiet): no job waits parked while its key
//   and every further limit it is under have room;
// - audit: each handler ran inside its slot's tenure as the ledger records it (JobStarted ..
//   SlotReleased of its lease);
// - replay: the read models are what replaying the ledger gives (replay --verify);
// - line: a key's line as the read models give it to an explanation (limitLine) is the one its
//   state gives (lineOf): figures, pause, holders, and each of its jobs' place and the jobs ahead;
// - given back: no job no worker knows is offered again past the give-back bound (issue 21 #6).

export interface ModelWorld {
  readonly keys: Readonly<Record<string, number>>;
  readonly limitKeys: Readonly<Record<string, number>>;
  readonly queueCaps: Readonly<Record<string, number>>;
  /** Workers' unknownJobDeadAfterMs: a job given back this long since its first give-back is dead, never offered again. */
  readonly giveBackDeadAfterMs: number;
}

export interface HandlerRun {
  readonly jobId: string;
  readonly leaseId: string;
  readonly worker: string;
  /** Whether its worker renews leases (one that does not lets them lapse). */
  readonly heartbeat: boolean;
  readonly startMs: number;
  readonly startSeq: number;
  endMs: number | null;
  endSeq: number | null;
  outcome: 'completed' | 'failed' | 'aborted' | null;
}

export interface Violation {
  readonly check: string;
  readonly message: string;
}

interface Recorded {
  readonly stream: string;
  readonly revision: number;
  readonly xid: bigint;
  readonly position: bigint;
  readonly event: KeyEvent;
}

const readLedger = async (pool: pg.Pool): Promise<Recorded[]> => {
  const { rows } = await pool.query<{ stream: string; stream_revision: string; type: string; data: object; metadata: object; xid: string; global_position: string }>(
    `SELECT stream, stream_revision, type, data, metadata, transaction_id::text AS xid, global_position FROM ledger_events ORDER BY transaction_id, global_position`,
  );
  return rows.map((r) => {
    const position = { commit: BigInt(r.xid), prepare: BigInt(r.global_position) };
    return {
      stream: r.stream,
      revision: Number(r.stream_revision),
      xid: position.commit,
      position: position.prepare,
      event: decodeRecorded({ stream: r.stream, revision: Number(r.stream_revision), position, type: r.type, data: r.data as never, metadata: r.metadata as never }),
    };
  });
};

const limitOf = (world: ModelWorld, stream: string): number | undefined => {
  if (!stream.startsWith(KEY_STREAM_PREFIX)) return 1;
  const key = stream.slice(KEY_STREAM_PREFIX.length);
  if (key.startsWith('queue:')) return world.queueCaps[key.slice('queue:'.length)];
  return world.keys[key] ?? world.limitKeys[key];
};

export interface CheckInput {
  readonly pool: pg.Pool;
  readonly world: ModelWorld;
  readonly runs: readonly HandlerRun[];
  /** quiet: the sweepers are stopped and nothing moves (the stranded check); final: every ledger is closed. */
  readonly phase: 'quiet' | 'final';
  readonly databaseUrl?: string;
}

export const checkRun = async ({ pool, world, runs, phase }: CheckInput): Promise<Violation[]> => {
  const ledger = await readLedger(pool);
  return phase === 'quiet'
    ? [...stranded(world, ledger), ...(await lines(pool, ledger))]
    : [...limitsAndTwice(world, ledger, runs), ...rejections(ledger), ...discarded(ledger), ...givenBack(world, ledger), ...audit(ledger, runs), ...(await replay(pool)), ...(await lines(pool, ledger))];
};

/** Each stream's state folded from its events (those passing `keep`). */
const statesOf = (ledger: readonly Recorded[], keep: (r: Recorded) => boolean = () => true): Map<string, KeyState> => {
  const events = new Map<string, KeyEvent[]>();
  for (const r of ledger) if (keep(r)) events.set(r.stream, [...(events.get(r.stream) ?? []), r.event]);
  return new Map([...events].map(([stream, es]) => [stream, fold(initialKeyState, es)]));
};

const hasRoom = (state: KeyState | undefined): boolean => state === undefined || (state.paused === undefined && (state.limit === 0 || state.holding < state.limit));

const stranded = (world: ModelWorld, ledger: readonly Recorded[]): Violation[] => {
  const states = statesOf(ledger);
  const out: Violation[] = [];
  for (const [stream, state] of states) {
    for (const [jobId, job] of Object.entries(state.jobs)) {
      if (job.status !== 'parked' || job.home !== undefined) continue;
      const needs = [stream, ...(job.limits ?? []).map(keyStream)];
      if (needs.every((s) => hasRoom(states.get(s)))) {
        out.push({ check: 'stranded', message: `${jobId} waits parked on ${stream} while every key it needs has room: ${needs.map((s) => `${s} ${states.get(s)?.holding ?? 0}/${states.get(s)?.limit ?? limitOf(world, s)}`).join(', ')}` });
      }
    }
  }
  return out;
};

const limitsAndTwice = (world: ModelWorld, ledger: readonly Recorded[], runs: readonly HandlerRun[]): Violation[] => {
  const out: Violation[] = [];
  const enqueued = new Map<string, { stream: string; queue: string; limits: readonly string[] }>();
  const lapsedAt = new Map<string, number>();
  for (const r of ledger) {
    if (r.event.type === 'JobEnqueued') enqueued.set(r.event.data.jobId, { stream: r.stream, queue: r.event.data.queue, limits: r.event.data.limits ?? [] });
    if (r.event.type === 'LeaseExpired') lapsedAt.set(r.event.data.leaseId, r.event.data.at);
  }
  // Every scope a job is under, by the world's rules: its stream, its limit keys, its queue's cap; and itself (never twice at once).
  const scopes = new Map<string, { limit: number; points: { t: number; seq: number; delta: 1 | -1; run: HandlerRun }[] }>();
  const scope = (name: string, limit: number) => {
    let s = scopes.get(name);
    if (s === undefined) scopes.set(name, (s = { limit, points: [] }));
    return s;
  };
  for (const run of runs) {
    const job = enqueued.get(run.jobId);
    if (job === undefined) {
      out.push({ check: 'limit', message: `a handler ran job ${run.jobId}, which the ledger never enqueued` });
      continue;
    }
    const lapse = lapsedAt.get(run.leaseId);
    const ended = run.endMs ?? Infinity;
    const [endT, endSeq] = lapse !== undefined && lapse < ended ? [lapse, -1] : [ended, run.endSeq ?? Infinity];
    const names = new Set([job.stream, ...job.limits.filter((l) => !l.startsWith('queue:')).map(keyStream), `job ${run.jobId}`]);
    if (world.queueCaps[job.queue] !== undefined) names.add(keyStream(queueCapKey(job.queue)));
    for (const name of names) {
      const limit = name.startsWith('job ') ? 1 : limitOf(world, name);
      if (limit === undefined) continue;
      const s = scope(name, limit);
      s.points.push({ t: run.startMs, seq: run.startSeq, delta: 1, run }, { t: endT, seq: endSeq, delta: -1, run });
    }
  }
  for (const [name, { limit, points }] of scopes) {
    points.sort((a, b) => a.t - b.t || a.seq - b.seq);
    const now = new Set<HandlerRun>();
    for (const p of points) {
      if (p.delta === -1) {
        now.delete(p.run);
        continue;
      }
      now.add(p.run);
      if (now.size > limit) {
        const who = [...now].map((r) => `${r.jobId} (lease ${r.leaseId}, ${r.worker}, from ${r.startMs} to ${r.endMs})`).join('; ');
        out.push({ check: name.startsWith('job ') ? 'twice at once' : 'limit', message: `${now.size} handlers of ${name} ran at once (limit ${limit}) at ${p.t}: ${who}` });
        break;
      }
    }
  }
  // A job whose handler completed runs again only if that run's lease lapsed under a worker that renews nothing.
  const byJob = new Map<string, HandlerRun[]>();
  for (const run of runs) byJob.set(run.jobId, [...(byJob.get(run.jobId) ?? []), run]);
  for (const [jobId, jobRuns] of byJob) {
    jobRuns.sort((a, b) => a.startSeq - b.startSeq);
    jobRuns.forEach((run, i) => {
      if (run.outcome !== 'completed' || i === jobRuns.length - 1) return;
      if (!run.heartbeat && lapsedAt.has(run.leaseId)) return;
      out.push({ check: 'ran again', message: `${jobId} completed under lease ${run.leaseId} (${run.worker}) and ran again under ${jobRuns[i + 1]!.leaseId}` });
    });
  }
  return out;
};

/**
 * Each JobRejected judged against the streams as the rejecting transaction could have found them.
 * Its home exactly (the events before it there). A further limit it only read, at any revision it
 * may have read: a transaction's xid is taken before it waits for its locks, so xid order is not
 * the order in which transactions saw each other (seed 2114: a release with a smaller xid that
 * committed after the rejection read its limit, made the checker call a right rejection wrong).
 * What orders them is the home stream both wrote: a transaction that wrote the home before the
 * rejection committed before it read the limit; one that wrote it after, after. Between those, the
 * limit's own revision order is the truth, so the rejection is wrong only if the limit had room at
 * every revision in that window.
 */
const rejections = (ledger: readonly Recorded[]): Violation[] => {
  const out: Violation[] = [];
  for (const rejected of ledger) {
    if (rejected.event.type !== 'JobRejected') continue;
    const { jobId } = rejected.event.data;
    const enqueued = ledger.find((r) => r.event.type === 'JobEnqueued' && r.event.data.jobId === jobId && r.stream === rejected.stream);
    const limits = (enqueued?.event.type === 'JobEnqueued' ? (enqueued.event.data.limits ?? []) : []).map(keyStream);
    const home = statesOf(ledger, (r) => r.stream === rejected.stream && r.revision < rejected.revision).get(rejected.stream);
    const homeWriters = ledger.filter((r) => r.stream === rejected.stream && r.xid !== rejected.xid);
    const before = new Set(homeWriters.filter((r) => r.revision < rejected.revision).map((r) => r.xid));
    const after = new Set(homeWriters.filter((r) => r.revision > rejected.revision).map((r) => r.xid));
    // Within the rejecting transaction, decisions run in submission order, and its appends are
    // written stream by stream: global positions do not say which of its limit events were decided
    // before the rejection (seed 100475: j6, enqueued just before j7 in the same flush, took the
    // cap's last slot; its LimitHeld was written after j7's JobRejected, on the cap's stream). Known
    // before: those of a job whose events on the rejected job's own stream precede the rejection.
    // The transaction's other limit events may have come before or after: they stay in the window.
    const decidedBefore = new Set(ledger.filter((r) => r.xid === rejected.xid && r.stream === rejected.stream && r.revision < rejected.revision && 'jobId' in r.event.data).map((r) => (r.event.data as { jobId: string }).jobId));
    const before_ = (r: Recorded) => before.has(r.xid) || (r.xid === rejected.xid && 'jobId' in r.event.data && decidedBefore.has((r.event.data as { jobId: string }).jobId));
    const roomAlways = (stream: string): boolean => {
      const events = ledger.filter((r) => r.stream === stream && !(r.xid === rejected.xid && 'jobId' in r.event.data && (r.event.data as { jobId: string }).jobId === jobId)).sort((a, b) => a.revision - b.revision);
      const lo = Math.max(-1, ...events.filter(before_).map((r) => r.revision));
      const hi = Math.min(Infinity, ...events.filter((r) => after.has(r.xid)).map((r) => r.revision - 1));
      // The limit as of each revision in the window [lo, hi]: room at every one of them?
      let state = fold(initialKeyState, events.filter((r) => r.revision <= lo).map((r) => r.event));
      if (!hasRoom(state)) return false;
      for (const r of events) {
        if (r.revision <= lo || r.revision > hi) continue;
        state = fold(state, [r.event]);
        if (!hasRoom(state)) return false;
      }
      return true;
    };
    if (hasRoom(home) && limits.every(roomAlways)) {
      const states = statesOf(ledger, (r) => r.xid < rejected.xid);
      out.push({
        check: 'rejected',
        message: `${jobId} was rejected ("${rejected.event.data.reason}") while every limit it is under had room at every point it could have read them: ${rejected.stream} ${home?.holding ?? 0}/${home?.limit ?? '?'}, ${limits.map((s) => `${s} ${states.get(s)?.holding ?? 0}/${states.get(s)?.limit ?? '?'}`).join(', ')}`,
      });
    }
  }
  return out;
};

const discarded = (ledger: readonly Recorded[]): Violation[] => {
  const out: Violation[] = [];
  const gone = new Set<string>();
  for (const r of ledger) {
    if (r.event.type === 'DeadDiscarded') gone.add(r.event.data.jobId);
    if (r.event.type === 'JobRetried' && gone.has(r.event.data.jobId)) out.push({ check: 'discarded', message: `${r.event.data.jobId} was discarded as dead, then retried (${r.stream} revision ${r.revision})` });
  }
  return out;
};

const givenBack = (world: ModelWorld, ledger: readonly Recorded[]): Violation[] => {
  const out: Violation[] = [];
  const first = new Map<string, number>();
  for (const { event: e } of ledger) {
    // A handler that ran it (JobFailed), or an operator's retry, starts the count over.
    if (e.type === 'JobFailed' || e.type === 'JobRetried') first.delete(e.data.jobId);
    if (e.type !== 'JobYielded' || e.data.retryAt === undefined) continue;
    const since = first.get(e.data.jobId) ?? e.data.at;
    first.set(e.data.jobId, since);
    if (e.data.at - since >= world.giveBackDeadAfterMs) out.push({ check: 'given back', message: `${e.data.jobId} was given back and offered again ${e.data.at - since} ms after its first give-back (bound ${world.giveBackDeadAfterMs} ms)` });
  }
  return out;
};

const audit = (ledger: readonly Recorded[], runs: readonly HandlerRun[]): Violation[] => {
  const out: Violation[] = [];
  const started = new Map<string, number>();
  const released = new Map<string, { at: number; reason: string }>();
  const lapsed = new Map<string, number>();
  for (const r of ledger) {
    const e = r.event;
    if (e.type === 'JobStarted') started.set(e.data.leaseId, e.data.at);
    if (e.type === 'SlotReleased') released.set(e.data.leaseId, { at: e.data.at, reason: e.data.reason });
    if (e.type === 'LeaseExpired') lapsed.set(e.data.leaseId, e.data.at);
  }
  for (const run of runs) {
    const from = started.get(run.leaseId);
    const to = released.get(run.leaseId);
    const end = Math.min(run.endMs ?? Infinity, lapsed.get(run.leaseId) ?? Infinity);
    if (from === undefined || from > run.startMs) {
      out.push({ check: 'audit', message: `${run.jobId} ran from ${run.startMs} under lease ${run.leaseId}, which the ledger ${from === undefined ? 'never started' : `started only at ${from}`}` });
    } else if (to !== undefined && to.at < end) {
      out.push({ check: 'audit', message: `${run.jobId}'s handler ran until ${end}, but the ledger released lease ${run.leaseId} (${to.reason}) at ${to.at}` });
    }
  }
  return out;
};

/** The most jobs of one key whose place in line is compared (each is a query). */
const LINE_JOBS = 20;

const lines = async (pool: pg.Pool, ledger: readonly Recorded[]): Promise<Violation[]> => {
  const out: Violation[] = [];
  const shown = (l: Omit<LimitLine, 'startedAt'>) => JSON.stringify(shownLine(l));
  for (const [stream, state] of statesOf(ledger)) {
    if (!stream.startsWith(KEY_STREAM_PREFIX)) continue;
    // Its parked jobs, and one that is not in its line.
    for (const jobId of [...Object.keys(state.jobs).filter((j) => state.jobs[j]!.status === 'parked').slice(0, LINE_JOBS), 'not-in-line']) {
      const want = shown(lineOf({ stream, state, startedAt: new Map() }, jobId));
      const read = await limitLine(pool, stream, jobId);
      const got = read === undefined ? 'nothing' : shown(read);
      if (got !== want) out.push({ check: 'line', message: `${jobId} on ${stream}: the read models give ${got}, the state ${want}` });
    }
  }
  return out.slice(0, 5);
};

const replay = async (pool: pg.Pool): Promise<Violation[]> => {
  const { differences } = await verify(pool, createReadModelProjections());
  return differences.slice(0, 5).map((d) => ({ check: 'replay', message: `${d.table} ${JSON.stringify(d.key)}: ${d.kind} ${JSON.stringify(d.columns)}` }));
};

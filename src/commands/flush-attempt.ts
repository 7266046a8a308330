import * as E from 'fp-ts/lib/Either.js';
import { RefusedError, describeDomainError } from '../domain/errors.js';
import type { Scratch } from '../domain/key-state.js';
import type { StreamRevision } from '../domain/ports/event-store.js';
import {
  CommitOutcomeUnknownError,
  StaleStateError,
  TransientWriteError,
  type DecidedAppend,
  type EventProbe,
  type HandedOffJob,
  type LockedStream,
  type WriteTransaction,
} from '../domain/ports/ledger-store.js';
import { EventDecodeError } from '../domain/recorded.js';
import type { Command } from '../domain/commands.js';
import { StatesDisagree } from '../domain/decide/decision.js';
import { FlushDecisions, UnreadableStream } from './flush-decisions.js';
import { StreamsMissing, SubmissionRefused, SubmissionUnreadable, logFields, sleep, type FlushContext, type Read, type Submission } from './flush-context.js';
import { readMessages } from './flush-messages.js';
import type { CommandResult, Decided, KeyCommand, StartedJob } from './key-command.js';
import { next, type Entry } from './key-states.js';

// One attempt of a flush: one transaction, read → lock (or trust) → catch up → decide → commit →
// remember, as drawn at the top of ./key-writer.ts. A failure rolls every decision back and
// throws; ./flush.ts decides what happens next.

/** One transaction. Resolves the submissions it wrote; returns those it had to postpone. */
export async function attemptFlush(ctx: FlushContext, batch: readonly Submission[], reads: readonly Read[], optimistic: boolean, mine: Set<string>): Promise<Submission[]> {
  const tx = await ctx.store.begin();
  const scratches = new Map<string, Scratch>();
  try {
    const passed = ctx.passOver.now(ctx.clock());
    const { items: read, counts } = await readMessages(tx, reads, { streams: [...new Set([...passed.streams, ...[...ctx.busy].filter((s) => !mine.has(s))])], jobs: passed.jobs });
    // A job of a stream another flush in flight decides on (it became busy while the read was on
    // its way) is left for a later flush: its row lock goes with this transaction.
    const elsewhere = read.filter((i) => ctx.busy.has(i.stream) && !mine.has(i.stream));
    const readItems = read.filter((i) => !elsewhere.includes(i));
    for (const i of readItems) {
      mine.add(i.stream);
      ctx.busy.add(i.stream);
    }
    const items = [...batch.flatMap((s) => s.items), ...readItems];
    if (items.length === 0) {
      await tx.commit({ appends: [] });
      for (const r of reads) r.resolve({ read: counts.get(r) ?? 0, started: [] });
      return [];
    }
    const streams = [...new Set(items.flatMap((i) => ctx.streamsOf(i)))];
    const broken = new Map<string, unknown>();
    const entries = new Map<string, Entry>();
    // When this writer wrote every stream last (or just made it up), it decides on the states it
    // has and locks in the same round trip as it writes: the expected revision in the append
    // refuses the write if that was wrong (StaleStateError), and the flush runs again, locking first.
    optimistic &&= reads.length === 0 && items.every((i) => ctx.streamsOf(i).every((stream) => ctx.states.current(stream, stream === i.stream && i.newStream === true) !== undefined));
    let locked: ReadonlyMap<string, LockedStream>;
    if (optimistic) {
      locked = new Map(streams.map((stream) => [stream, { stream, revision: ctx.states.revision(stream), snapshot: undefined, events: [], deferred: false }]));
      for (const stream of streams) entries.set(stream, ctx.states.entry(stream));
    } else {
      locked = await tx.lock(streams.map((stream) => ({ stream, after: ctx.states.revision(stream) })));
      for (const l of locked.values()) {
        try {
          entries.set(l.stream, await ctx.states.catchUp(l));
          ctx.quarantined.delete(l.stream);
          ctx.passOver.readable(l.stream);
        } catch (error) {
          broken.set(l.stream, error);
          noteBroken(ctx, l.stream, error);
        }
      }
    }
    const waits = (s: readonly KeyCommand[]) => s.some((i) => ctx.streamsOf(i).some((stream) => locked.get(stream)!.deferred));
    // A command fails with its own stream's break. A broken stream it only may read is left out:
    // its decision serves what it can without it (a line waiting on it is served later), and
    // fails only if it truly needs that stream (FlushDecisions: UnreadableStream). Failing on
    // any planned stream let one quarantined limit key stall every key whose line reached it,
    // and drop the results recorded on them (issue 21, item 3).
    const fails = (s: readonly KeyCommand[]) => s.map((i) => i.stream).find((stream) => broken.has(stream));
    const postponed = batch.filter((s) => waits(s.items));
    const failed = batch.filter((s) => !waits(s.items) && fails(s.items) !== undefined);
    const going = batch.filter((s) => !postponed.includes(s) && !failed.includes(s));
    // A job of a stream that cannot be read waits for the stream to be fixed (passed over); the others start.
    for (const i of readItems) if (!waits([i]) && broken.has(i.stream)) ctx.passOver.stream(i.stream, ctx.clock() + ctx.options.passOverMs);
    const readGoing = readItems.filter((i) => !waits([i]) && !broken.has(i.stream));
    const quarantine = [...broken.values()].filter((e): e is EventDecodeError => e instanceof EventDecodeError);

    const decisions = new FlushDecisions({
      entries,
      scratches,
      broken,
      absent: (stream) => ctx.states.absent(stream),
      now: ctx.clock(),
      eventId: ctx.options.eventId,
      refused: (item, refusal) => ctx.log.info({ ...logFields(item.stream, item.command), refusal: refusal.tag }, describeDomainError(refusal)),
    });
    const { decided } = decisions;
    const command = await graced(tx, going, broken, ctx);
    for (const s of going) {
      for (const item of s.items) {
        try {
          decisions.decide(item, (streams) => { throw new StreamsMissing(s, item, streams); }, command(item));
        } catch (error) {
          // Trusted copies that disagree are stale: decided again on states read in this transaction (runFlush).
          if (error instanceof StatesDisagree && optimistic) throw new StaleStateError(error.message, [...error.streams]);
          throw error instanceof UnreadableStream ? new SubmissionUnreadable(s, error.cause) : error;
        }
      }
    }
    for (const item of readGoing) decisions.decide(item, (streams) => { throw new Error(`a Start on ${item.stream} needs streams ${streams.join(', ')}`); });
    for (const [item, ids] of decisions.eventIds) ctx.lastIds.set(item, ids);

    // A refusal, or a decision to do nothing, writes nothing for the expected revision to check:
    // made on a state that may be stale (optimistic), it is not an answer until the stream is read.
    if (optimistic && [...decided.values()].some((d) => E.isLeft(d) || d.right.events.length === 0)) {
      throw new StaleStateError('a decision that writes nothing was made on a state not read in this transaction');
    }
    for (const sub of going) {
      const refused = sub.atomic ? sub.items.find((i) => E.isLeft(decided.get(i)!)) : undefined;
      const refusal = refused && decided.get(refused)!;
      if (refusal !== undefined && E.isLeft(refusal)) throw new SubmissionRefused(sub, new RefusedError(refusal.left, refused!.stream));
    }
    // A refused Start (a stale lease, one already started) means the row is behind the ledger (an async read model): passed over until it catches up.
    for (const i of readGoing) if (E.isLeft(decided.get(i)!)) ctx.passOver.job(i.message.jobId, ctx.clock() + ctx.options.passOverMs);
    const { appends, snapshots, after } = decisions.appends({ snapshotEvery: ctx.options.snapshotEvery, keptEvery: ctx.options.snapshotsKeptEvery });
    // Invariant 9: what a decision only read is checked at commit too. Locked streams cannot
    // move under this transaction; those decided on unlocked can: the states it trusted
    // (optimistic) and the queue caps it took to be absent.
    const readChecks = [
      ...(optimistic ? streams.filter((stream) => !after.has(stream)).map((stream) => ({ stream, revision: entries.get(stream)!.revision })) : []),
      ...[...decisions.readAbsent].map((stream) => ({ stream, revision: 'no_stream' as const })),
    ];
    const committed = await tx.commit({
      appends,
      snapshots,
      ...(readChecks.length > 0 ? { readChecks } : {}),
      ...(quarantine.length > 0 ? { quarantine } : {}),
      ...(optimistic ? { lockFirst: streams } : {}),
    }).catch(async (error: unknown) => {
      if (!(error instanceof CommitOutcomeUnknownError)) throw error;
      // FAILURE-MODES #19: never guess. A commit is all or nothing, so one of its events says.
      const first = appends[0];
      if (first === undefined || !(await landed(ctx, { stream: first.stream, revision: next(first.expected as StreamRevision | 'no_stream'), eventId: first.events[0]!.eventId! }))) {
        throw new TransientWriteError(`COMMIT outcome unknown and nothing landed: ${error.message}`);
      }
      ctx.log.warn({ err: error }, 'the COMMIT answer was lost, but the flush had landed: reported as written');
      return { handedOff: await handedOffIn(ctx, appends), positionOf: () => undefined };
    });

    // Remember: the decided states are the states at the new revisions.
    for (const [stream, revision] of after) {
      entries.get(stream)!.revision = revision;
      ctx.states.wrote(stream);
    }
    const result = (item: KeyCommand): CommandResult =>
      E.map((d: Decided) => {
        const revision = after.get(item.stream) ?? d.revision;
        const handedOff = d.events.flatMap((e) => (e.type === 'JobStarted' ? [committed.handedOff.get(e.data.jobId)].filter((j) => j !== undefined) : []));
        return handedOff.length > 0 ? { ...d, revision, handedOff } : { ...d, revision };
      })(decided.get(item)!);
    for (const s of going) s.resolve(s.items.map(result));
    for (const [stream, fill] of decisions.fills) ctx.fillLater(stream, fill);
    for (const s of failed) s.reject(broken.get(fails(s.items)!));
    for (const r of reads) {
      const mine = readItems.filter((i) => i.read === r);
      const started = mine.flatMap((i): StartedJob[] => {
        const d = decided.get(i);
        const event = d !== undefined && E.isRight(d) ? d.right.events.find((e) => e.type === 'JobStarted') : undefined;
        return event?.type === 'JobStarted' ? [{ stream: i.stream, message: i.message, started: event.data }] : [];
      });
      r.resolve({ read: counts.get(r) ?? 0, started });
    }
    return postponed;
  } catch (error) {
    for (const scratch of scratches.values()) scratch.rollbackTo();
    await tx.rollback();
    if (error instanceof StaleStateError) {
      for (const stream of error.streams) ctx.states.moved(stream);
      for (const item of batch.flatMap((s) => s.items)) for (const stream of ctx.streamsOf(item)) ctx.states.moved(stream);
    }
    throw error;
  }
}

/**
 * The commands to decide, each as submitted but for an ExpireLeases on streams that this
 * transaction reads fine while a reader's quarantine row of them is still there: they have just
 * come out of quarantine (the sweeper's re-check, which ends it and records its grace, comes at
 * its next sweep), so their leases get their grace from now. The sweeper read its candidates and
 * the quarantines before the stream was fixed and the flush after: without this, a lease expired
 * a few ms after the fix, before its worker's result (held back by the quarantine) landed, and the
 * completed job ran again (the model checker, seeds 100045, 100105, 100480).
 */
async function graced(tx: WriteTransaction, going: readonly Submission[], broken: ReadonlyMap<string, unknown>, ctx: FlushContext): Promise<(item: KeyCommand) => Command> {
  const expiring = going.flatMap((s) => s.items).filter((i) => i.command.type === 'ExpireLeases');
  if (expiring.length === 0) return (item) => item.command;
  const streams = [...new Set(expiring.flatMap((i) => ctx.streamsOf(i)))].filter((stream) => !broken.has(stream));
  const ended = await tx.quarantined(streams);
  if (ended.size === 0) return (item) => item.command;
  const now = ctx.clock();
  return (item) => {
    const { command } = item;
    if (command.type !== 'ExpireLeases') return command;
    const mine = ctx.streamsOf(item).filter((stream) => ended.has(stream));
    return mine.length === 0 ? command : { ...command, streamGrace: { ...command.streamGrace, ...Object.fromEntries(mine.map((stream) => [stream, now])) } };
  };
}

/** A stream the flush could not bring up to date: its commands fail, its messages wait, the rest of the flush goes on. */
function noteBroken(ctx: FlushContext, stream: string, error: unknown): void {
  if (!(error instanceof EventDecodeError)) {
    ctx.log.warn({ err: error, stream }, 'stream could not be brought up to date: its commands fail; the other streams go on');
    return;
  }
  // The error's message names the event's stream, revision and global position.
  if (ctx.quarantined.has(stream)) {
    ctx.log.debug({ err: error, stream }, 'stream still quarantined');
    return;
  }
  ctx.quarantined.add(stream);
  ctx.log.error({ err: error, stream }, 'stream quarantined: its commands are refused and its messages wait until it decodes again; the other streams go on');
}

/** Whether an event is recorded, asking again (with a growing pause) while the database cannot answer. */
async function landed(ctx: FlushContext, probe: EventProbe): Promise<boolean> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await ctx.store.recorded(probe);
    } catch (error) {
      if (attempt >= ctx.options.maxAttempts) throw error;
      await sleep(Math.min(1_000, 10 * 2 ** attempt));
    }
  }
}

/**
 * The jobs a landed flush whose COMMIT answer was lost started by direct handoff (a start of a
 * job admitted in the same append), read back: the answer would have carried them, and without
 * them their slots would sit idle until the leases expire. Past this point the flush MUST NOT
 * fail (it landed): a failed read leaves them to lease expiry.
 */
async function handedOffIn(ctx: FlushContext, appends: readonly DecidedAppend[]): Promise<Map<string, HandedOffJob>> {
  const jobs = appends.flatMap(({ stream, decided = [] }) => {
    const admitted = new Set(decided.flatMap((e) => (e.type === 'SlotAcquired' || e.type === 'JobPromoted' ? [e.data.leaseId] : [])));
    return decided.flatMap((e) => (e.type === 'JobStarted' && admitted.has(e.data.leaseId) ? [{ jobId: e.data.jobId, stream }] : []));
  });
  if (jobs.length === 0) return new Map();
  try {
    return new Map((await ctx.store.handedOffJobs(jobs)).map((job) => [job.jobId, job]));
  } catch (error) {
    ctx.log.warn({ err: error, jobIds: jobs.map((j) => j.jobId) }, 'reading the handed-off jobs of a flush whose COMMIT answer was lost failed: they run again once their leases expire');
    return new Map();
  }
}

import { reconnectDelayMs } from '../domain/backoff.js';
import { DuplicateEventIdError } from '../domain/ports/event-store.js';
import { EventDecodeError } from '../domain/recorded.js';
import { StaleStateError, TransientWriteError } from '../domain/ports/ledger-store.js';
import { attemptFlush } from './flush-attempt.js';
import { StreamsMissing, SubmissionRefused, SubmissionUnreadable, sleep, submissionStreams, type FlushContext, type Read, type Submission } from './flush-context.js';
import { ConflictRetriesExhaustedError } from './key-writer-options.js';

/** One flush, retried while transient; a failure of anything else is pinned on the submission that caused it. */
export async function runFlush(ctx: FlushContext, batch: Submission[], reads: Read[], streams: Set<string>): Promise<void> {
  let optimistic = true;
  let outage: { readonly since: number; tries: number } | undefined;
  for (;;) {
    const generation = ctx.outages.generation;
    try {
      const postponed = await attemptFlush(ctx, batch, reads, optimistic, streams);
      if (outage !== undefined) ctx.outages.answered();
      ctx.requeue(postponed);
      return;
    } catch (error) {
      if (error instanceof StaleStateError && optimistic) {
        optimistic = false;
        continue;
      }
      if (ctx.outages.failed(error, generation)) {
        // The database is away: wait for it (quietly: the outage is logged once, by whoever
        // watches), then decide again on what the streams hold by then.
        optimistic = false;
        outage ??= { since: ctx.clock(), tries: 0 };
        if (ctx.clock() - outage.since < ctx.options.outageWaitMs) {
          await sleep(reconnectDelayMs(++outage.tries, ctx.random()));
          continue;
        }
        for (const s of batch) s.reject(error);
        for (const r of reads) r.reject(error);
        return;
      }
      // A stale state after locking: a stream decided on unlocked (a queue cap taken to be absent) moved; decided again, locked.
      if (error instanceof TransientWriteError || error instanceof StaleStateError) {
        // The states may be what failed (a stream another writer just created): lock first from now on.
        optimistic = false;
        for (const s of batch) s.attempts++;
        const exhausted = batch.filter((s) => s.attempts >= ctx.options.maxAttempts);
        for (const s of exhausted) s.reject(new ConflictRetriesExhaustedError(submissionStreams(s), s.attempts, { cause: error }));
        batch = batch.filter((s) => !exhausted.includes(s));
        ctx.log.debug({ err: error }, 'flush failed for a transient reason; running it again');
        await sleep(Math.min(50, 2 ** Math.min(batch[0]?.attempts ?? 1, 6)) * ctx.random());
        if (batch.length === 0 && reads.length === 0) return;
        continue;
      }
      if (error instanceof StreamsMissing) {
        // Decided again with them, locked in the same round as the rest: in this flush when no
        // other flush in flight has them, else in a later one (in front, so in order).
        const { submission } = error;
        const learned = ctx.learned.get(error.item) ?? new Set<string>();
        for (const stream of error.streams) learned.add(stream);
        ctx.learned.set(error.item, learned);
        optimistic = false;
        if (++submission.attempts >= ctx.options.maxAttempts) {
          submission.reject(new ConflictRetriesExhaustedError(submissionStreams(submission), submission.attempts));
          batch = batch.filter((s) => s !== submission);
        } else if (error.streams.some((stream) => ctx.busy.has(stream) && !streams.has(stream))) {
          batch = batch.filter((s) => s !== submission);
          ctx.putFirst(submission);
        } else {
          for (const item of submission.items) ctx.plan(item);
          for (const stream of error.streams) {
            streams.add(stream);
            ctx.busy.add(stream);
          }
        }
        if (batch.length === 0 && reads.length === 0) return;
        continue;
      }
      if (error instanceof SubmissionUnreadable) {
        // The others go again without it; it fails with why its stream cannot be read (a worker keeps its result and tries again).
        // The quarantine is recorded first: whoever learns of the failure finds it recorded.
        if (error.cause instanceof EventDecodeError) await recordQuarantine(ctx, error.cause);
        error.submission.reject(error.cause);
        batch = batch.filter((s) => s !== error.submission);
        if (batch.length === 0 && reads.length === 0) return;
        continue;
      }
      if (error instanceof SubmissionRefused) {
        // Its decisions were rolled back with the rest of the attempt; the others go again without it.
        error.submission.reject(error.refusal);
        batch = batch.filter((s) => s !== error.submission);
        if (batch.length === 0 && reads.length === 0) return;
        continue;
      }
      const culprit = error instanceof DuplicateEventIdError ? batch.find((s) => produces(ctx, s, error.eventId)) : undefined;
      if (culprit !== undefined) {
        culprit.reject(error);
        batch = batch.filter((s) => s !== culprit);
        continue;
      }
      if (batch.length + reads.length > 1) {
        // Something in the flush is broken for good (bad data, a bug): each part alone finds which.
        ctx.log.warn({ err: error, submissions: batch.length, reads: reads.length }, 'flush failed; writing its parts one by one');
        for (const s of batch) await runFlush(ctx, [s], [], streams);
        for (const r of reads) await runFlush(ctx, [], [r], streams);
        return;
      }
      for (const s of batch) s.reject(error);
      for (const r of reads) r.reject(error);
      return;
    }
  }
}

/** Whether the submission's last attempt gave one of its events this id (whose event id was a duplicate). */
const produces = (ctx: FlushContext, s: Submission, eventId: string | undefined): boolean =>
  eventId !== undefined && s.items.some((item) => ctx.lastIds.get(item)?.includes(eventId));

/**
 * Records the writer's quarantine of a stream that only a failed submission's decision needed (a
 * limit key its Complete releases): the attempt that found it rolled back, and the flush may go on
 * without touching the stream again, so nothing else would record it. Without the record the
 * sweeper never sees the quarantine end, and the leases it held back get no grace (the model
 * checker, seed 100210). Its own transaction; a failure here is logged, the flush goes on.
 */
async function recordQuarantine(ctx: FlushContext, error: EventDecodeError): Promise<void> {
  try {
    const tx = await ctx.store.begin();
    await tx.commit({ appends: [], quarantine: [error] }).catch(async (failure: unknown) => {
      await tx.rollback();
      throw failure;
    });
  } catch (failure) {
    ctx.log.warn({ err: failure, stream: error.stream }, 'recording a quarantine failed; a later flush that reads the stream records it');
  }
}

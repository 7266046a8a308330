import type pg from 'pg';
import { comparePositions, type EventStore, type RecordedEvent, type Subscription } from '../domain/ports/event-store.js';
import { silentLogger, type Logger } from '../domain/ports/logger.js';
import type { Outages } from '../domain/ports/outages.js';
import { EventDecodeError } from '../domain/recorded.js';
import { applyStatements, projectAll, send, toProjected } from './apply.js';
import { loadCheckpoint, loadCheckpointRow, projectionLockSql, visibleIn } from './checkpoint.js';
import { AdvisoryLeader, LeadershipLostError } from './leader.js';
import type { ProjectedEvent, Projection } from './projection.js';
import { clearQuarantines, loadQuarantines, projectionReader, quarantineOf, recordQuarantines, type Quarantine } from './quarantine.js';
import { inTransaction } from './transaction.js';

// The async projection runner: a catch-up subscription applying a projection's batches and moving
// its checkpoint in one transaction each, led by one runner per projection at a time (./leader.ts),
// with streams whose events do not decode held back (quarantined) rather than failing the rest.
// How statements are made and applied: ./apply.ts; where a projection stands: ./checkpoint.ts.

export interface AsyncProjectionRunnerOptions {
  readonly pool: pg.Pool;
  readonly store: EventStore;
  /** Names the checkpoint and the lock. */
  readonly name: string;
  /** Applied in order, in each batch's transaction. */
  readonly projections: readonly Projection[];
  /** Only streams with this prefix are read (default: all; the projections pass over those they do not handle). */
  readonly streamPrefix?: string;
  /** Events per transaction, about (default 500; a batch always ends with a whole transaction). */
  readonly batchSize?: number;
  /** Subscription polling when no notification arrives (default 500 ms). */
  readonly pollIntervalMs?: number;
  /** How often a runner without the lock tries again, and the pause after a failure (default 1000 ms). */
  readonly retryMs?: number;
  /** Told of a failure the database's absence explains (logged once per outage there, not each retry). */
  readonly outages?: Outages;
  /**
   * Another runner's checkpoint this one never passes: the dispatcher follows the read models,
   * whose jl_jobs rows its messages are made of.
   */
  readonly follows?: string;
  readonly logger?: Logger;
}

/** The batch went past the followed checkpoint: what could be applied was; read again from there later. */
class FollowedBehind extends Error {}

/**
 * Whether the session `pid` ($pidParam) holds the advisory lock of projection $nameParam. The guard
 * of every write a leading runner makes: its lock connection may be gone (and a successor leading)
 * before its own 'end' or 'error' arrives, so only the server's pg_locks, read in the writing
 * transaction, says it still leads.
 */
const holdsLockSql = (nameParam: number, pidParam: number): string => `EXISTS (
  SELECT FROM pg_locks l, (SELECT ${projectionLockSql(nameParam)} AS k) h
  WHERE l.locktype = 'advisory' AND l.granted AND l.pid = $${pidParam} AND l.objsubid = 1
    AND l.classid = ((h.k >> 32) & 4294967295)::oid AND l.objid = (h.k & 4294967295)::oid
)`;

/**
 * Decodes events for the projections, going on without a stream whose event does not decode:
 * that stream's events from there on are left out (`stopped`: where each stream stopped), the
 * others' come out in order. `skip`: streams already held back.
 */
const decodeGoingOn = (events: readonly RecordedEvent[], skip: ReadonlyMap<string, unknown>): { projected: ProjectedEvent[]; stopped: Map<string, Quarantine> } => {
  const projected: ProjectedEvent[] = [];
  const stopped = new Map<string, Quarantine>();
  for (const e of events) {
    if (skip.has(e.stream) || stopped.has(e.stream)) continue;
    try {
      projected.push(toProjected(e));
    } catch (error) {
      const quarantine = error instanceof EventDecodeError ? quarantineOf(error) : undefined;
      if (quarantine === undefined) throw error;
      stopped.set(e.stream, quarantine);
    }
  }
  return { projected, stopped };
};

/**
 * Async mode: a catch-up subscription from the checkpoint; each batch (whole transactions) and the
 * checkpoint are written in one transaction, so a crash can neither skip nor repeat one. Exactly
 * one runner per checkpoint applies at a time: the one holding a session advisory lock on a
 * dedicated connection. The others try again every `retryMs` and take over (from the stored
 * checkpoint) when the holder stops or its connection drops. A failing batch (or read) ends the
 * subscription; the runner lets the lock go, pauses and starts over, so a transient failure costs
 * a retry, and a permanent one is logged each time.
 *
 * An event that does not decode fails neither the batch nor the other streams: the runner holds
 * its stream back from that event on (a quarantine, recorded in jl_quarantined with the batch) and
 * applies the rest. Every `retryMs` it reads each held stream again from there; once it decodes,
 * the events held back (up to the checkpoint) are applied and the quarantine ends, in one
 * transaction, and the stream's later events come through the subscription as before.
 */
export class AsyncProjectionRunner {
  private loop: Promise<void> | undefined;
  private stopping = false;
  private leading = false;
  private wake: (() => void) | undefined;
  private readonly log: Logger;
  /** Streams held back while leading (jl_quarantined rows of this runner), loaded when it takes the lock. */
  private held = new Map<string, Quarantine>();
  /** Batches and recoveries of held streams, one at a time: both move what the projection has applied. */
  private applying: Promise<unknown> = Promise.resolve();
  private readonly reader: string;

  constructor(private readonly options: AsyncProjectionRunnerOptions) {
    this.log = (options.logger ?? silentLogger).child({ projection: options.name });
    this.reader = projectionReader(options.name);
  }

  /** Whether this runner holds the lock and is applying. */
  get isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    if (this.loop) return;
    this.stopping = false;
    this.loop = this.run();
  }

  /** Stops applying (after the batch in progress) and lets the lock go. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    await this.loop;
    this.loop = undefined;
  }

  private async run(): Promise<void> {
    const { name, retryMs = 1_000 } = this.options;
    while (!this.stopping) {
      const generation = this.options.outages?.generation;
      let leader: AdvisoryLeader | undefined;
      let subscription: Subscription | undefined;
      let recovery: NodeJS.Timeout | undefined;
      try {
        leader = await AdvisoryLeader.connect(this.options.pool.options, { key: projectionLockSql(1), values: [name] });
        while (!this.stopping && !(await leader.tryLead())) await this.pause(retryMs);
        if (this.stopping) return;
        const { pid } = leader;
        this.leading = true;
        this.held = await loadQuarantines(this.options.pool, this.reader);
        recovery = setInterval(() => {
          if (this.held.size > 0) this.serially(() => this.recover(pid)).catch((error: unknown) => this.log.warn({ err: error }, 'reading held-back streams again failed; trying again'));
        }, retryMs);
        // Subscriptions come and go (a followed runner not far enough yet) under the one lock.
        while (!this.stopping) {
          const stopped = new Promise<void>((resolve) => (this.wake = resolve));
          if (this.stopping) break;
          const after = await loadCheckpoint(this.options.pool, name);
          this.log.debug({ commit: after.commit.toString(), prepare: after.prepare.toString() }, 'projection runner reading');
          subscription = this.options.store.subscribe(
            {
              after,
              batchSize: this.options.batchSize ?? 500,
              wholeTransactions: true,
              pollIntervalMs: this.options.pollIntervalMs ?? 500,
              ...(this.options.streamPrefix === undefined ? {} : { streamPrefix: this.options.streamPrefix }),
            },
            (events) => this.serially(() => this.applyLeading(events, pid)),
          );
          const ended = await Promise.race([subscription.done.then(() => undefined, (error: unknown) => error), leader.lost, stopped]);
          await subscription.stop();
          subscription = undefined;
          if (!(ended instanceof FollowedBehind)) {
            if (ended !== undefined) throw ended;
            break;
          }
          await this.pause(this.options.pollIntervalMs ?? 500);
        }
      } catch (error) {
        if (!this.stopping) {
          if (!this.options.outages?.failed(error, generation)) this.log.warn({ err: error }, 'projection runner failed; retrying');
          await this.pause(retryMs);
        }
      } finally {
        this.leading = false;
        clearInterval(recovery);
        await subscription?.stop();
        await this.applying;
        // Ending the session lets the lock go, once the batch in flight is done.
        await leader?.release();
      }
    }
  }

  private serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.applying.then(fn);
    this.applying = run.catch(() => undefined);
    return run;
  }

  /**
   * One batch and the checkpoint, in one transaction. The checkpoint moves only while this
   * runner's lock connection (pid) still holds the lock, so a runner that lost it (and may
   * already have a successor) writes nothing.
   */
  private async applyLeading(all: readonly RecordedEvent[], pid: number): Promise<void> {
    const { pool, name, projections, follows } = this.options;
    const applied = await inTransaction(pool, async (client) => {
      const { snapshot } = await loadCheckpointRow(client, name);
      let events = all;
      if (follows !== undefined) {
        const limit = await loadCheckpoint(client, follows);
        events = all.filter((e) => comparePositions(e.position, limit) <= 0);
      }
      const cut = events.length < all.length;
      if (events.length === 0) return { cut, stopped: new Map<string, Quarantine>() };
      // A rebuild applied whatever its snapshot saw, also above the checkpoint it left.
      const fresh = snapshot === null ? events : events.filter((e) => !visibleIn(snapshot, e.position.commit));
      const { projected, stopped } = decodeGoingOn(fresh, this.held);
      await applyStatements(client, projectAll(projections, projected));
      if (stopped.size > 0) await send(client, recordQuarantines(this.reader, [...stopped.values()]));
      const to = events.at(-1)!.position;
      const result = await client.query(
        `INSERT INTO projection_checkpoints AS c (projection, commit, prepare)
         SELECT $1, $2::numeric, $3::numeric
         WHERE ${holdsLockSql(1, 4)}
         ON CONFLICT (projection) DO UPDATE SET commit = excluded.commit, prepare = excluded.prepare, updated_at = statement_timestamp(),
           -- Past the snapshot's xmax nothing it saw is left ahead.
           applied_snapshot = CASE WHEN excluded.commit::text::xid8 >= pg_snapshot_xmax(c.applied_snapshot) THEN NULL ELSE c.applied_snapshot END
         WHERE (c.commit, c.prepare) < (excluded.commit, excluded.prepare)`,
        [name, to.commit.toString(), to.prepare.toString(), pid],
      );
      if (result.rowCount !== 1) throw new LeadershipLostError(`projection ${name}: lock lost or checkpoint moved by another runner`);
      return { cut, stopped };
    });
    for (const q of applied.stopped.values()) {
      this.held.set(q.stream, q);
      this.log.error({ stream: q.stream, revision: q.revision, err: q.error }, 'stream quarantined: held back from this event on until it decodes; the other streams go on');
    }
    // After the commit: what was applied stays, and the subscription reads again from there.
    if (applied.cut) throw new FollowedBehind();
  }

  /**
   * Reads each held-back stream again from where it stopped, up to the checkpoint (what comes
   * after reaches the runner through the subscription): the events that decode now are applied,
   * and the quarantine ends, or moves on to the next event that does not decode (or is only
   * seen again: last_seen), in one transaction while this runner still holds the lock.
   */
  private async recover(pid: number): Promise<void> {
    const { pool, name, projections, store } = this.options;
    const outcome = await inTransaction(pool, async (client) => {
      const { position: checkpoint, snapshot } = await loadCheckpointRow(client, name);
      const read: RecordedEvent[] = [];
      for (const q of this.held.values()) {
        const events = await store.readStream(q.stream, { fromRevision: q.revision });
        read.push(...events.filter((e) => comparePositions(e.position, checkpoint) <= 0 && (snapshot === null || !visibleIn(snapshot, e.position.commit))));
      }
      // In global order, as a batch is: every held stream's events, each up to where it stops (if it does).
      const { projected, stopped } = decodeGoingOn(read.sort((a, b) => comparePositions(a.position, b.position)), new Map());
      const cleared = [...this.held.values()].filter((q) => !stopped.has(q.stream));
      const still = [...stopped.values()];
      const { rows } = await client.query<{ ok: boolean }>(`SELECT ${holdsLockSql(1, 2)} AS ok`, [name, pid]);
      if (rows[0]?.ok !== true) throw new LeadershipLostError(`projection ${name}: lock lost`);
      await applyStatements(client, projectAll(projections, projected));
      if (still.length > 0) await send(client, recordQuarantines(this.reader, still));
      if (cleared.length > 0) await send(client, clearQuarantines(this.reader, cleared));
      return { cleared, still };
    });
    for (const q of outcome.cleared) {
      this.held.delete(q.stream);
      this.log.info({ stream: q.stream, revision: q.revision }, 'stream decodes again: quarantine over, held-back events applied');
    }
    for (const q of outcome.still) this.held.set(q.stream, q);
  }

  private pause(ms: number): Promise<void> {
    if (this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}

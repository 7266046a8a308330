import { createHash } from 'node:crypto';
import pg from 'pg';
import { decodeRecorded } from '../commands/key-state-loader.js';
import type { KeyEvent } from '../domain/events.js';
import { START, type EventStore, type GlobalPosition, type RecordedEvent, type StreamRevision, type Subscription } from '../domain/ports/event-store.js';
import { silentLogger, type Logger } from '../domain/ports/logger.js';
import { keyOfStream, type ProjectedEvent, type Projection, type Statement } from './projection.js';

// Applies projections (./projection.ts) to batches of recorded events, each batch with the
// projection's bookkeeping IN ONE TRANSACTION:
// - projection_streams(projection, stream, revision): the last revision applied per stream. An
//   event at or below it is skipped, so applying a batch twice changes nothing; an event above
//   revision + 1 is a gap and fails the batch (never skipped silently).
// - projection_checkpoints: the global position an async runner has reached (async mode only).
// Three ways to run the same projection code:
// - inline: `inlineProjections(...)`, an InlineHandler for PostgresEventStore, applies the events
//   inside the append transaction with the store's client;
// - async: `AsyncProjectionRunner`, a catch-up subscription with a checkpoint, one active runner
//   per projection (session advisory lock);
// - rebuild: ./rebuild.ts.

/** Anything that runs a query: a pg.PoolClient, a pg.Client (inside a transaction), a pg.Pool. */
export type Queryable = Pick<pg.ClientBase, 'query'>;

/** Sends messages to a queue through `db`, so they commit with the batch (e.g. PgQueue.sendBatch with `{ db }`). */
export type SendMessages = (db: Queryable, queue: string, messages: readonly unknown[]) => Promise<unknown>;

export interface ApplyOptions {
  /** Required by a projection whose statements emit messages (the dispatcher). */
  readonly send?: SendMessages;
}

export interface Applied {
  /** Events mapped and recorded. */
  readonly applied: number;
  /** Events of the projection's streams at or below the recorded revision: applied before. */
  readonly skipped: number;
  /** Messages sent. */
  readonly messages: number;
}

/** The batch would skip events of a stream: they were never applied to this projection. */
export class ProjectionGapError extends Error {
  override readonly name = 'ProjectionGapError';
  constructor(
    readonly projection: string,
    readonly stream: string,
    /** Last revision applied (-1: none). */
    readonly applied: StreamRevision,
    readonly revision: StreamRevision,
  ) {
    super(
      `projection ${projection}: stream ${JSON.stringify(stream)} goes from revision ${applied} to ${revision}; ` +
        `the events in between were never applied (rebuild the projection)`,
    );
  }
}

/** A statement touched another number of rows than the projection said it must. */
export class ProjectionStatementError extends Error {
  override readonly name = 'ProjectionStatementError';
  constructor(
    readonly projection: string,
    readonly stream: string,
    readonly revision: StreamRevision,
    readonly eventType: string,
    readonly expected: number,
    readonly actual: number,
  ) {
    super(`projection ${projection}: ${eventType} at ${JSON.stringify(stream)} revision ${revision} touched ${actual} rows, expected ${expected}`);
  }
}

// Decoded once per recorded event, however many projections apply it.
const decoded = new WeakMap<RecordedEvent, KeyEvent>();
const decode = (e: RecordedEvent): KeyEvent => {
  let event = decoded.get(e);
  if (event === undefined) decoded.set(e, (event = decodeRecorded(e)));
  return event;
};

const projected = (e: RecordedEvent): ProjectedEvent => ({ event: decode(e), stream: e.stream, revision: e.revision, position: e.position, key: keyOfStream(e.stream) });

/**
 * Applies `events` (in global order) to one projection through `db`, which MUST be inside a
 * transaction that the caller commits: the rows, the messages and the stream revisions go
 * together. Events of streams the projection does not handle are passed over.
 */
export async function applyEvents(
  db: Queryable,
  projection: Projection,
  events: readonly RecordedEvent[],
  options: ApplyOptions = {},
): Promise<Applied> {
  const [applied] = await applyProjections(db, [projection], events, options);
  return applied!;
}

/** A stream's events in a batch, for one projection. */
interface Run {
  readonly projection: Projection;
  readonly stream: string;
  readonly first: StreamRevision;
  readonly last: StreamRevision;
}

const runKey = (projection: string, stream: string) => `${projection}\u0000${stream}`;

/**
 * applyEvents for several projections at once, with their bookkeeping shared: the hot (inline)
 * path costs one statement of bookkeeping for the whole append, plus the projections' own.
 *
 * Bookkeeping: each stream's revision row is first CLAIMED in one statement, moved from
 * first - 1 to the batch's last revision (created for a stream whose first event is in the
 * batch). A claimed stream is known to be exactly where the batch begins: all its events apply.
 * A stream that could not be claimed (events applied before: a redelivery, an overlapping batch;
 * or a gap) is read with FOR UPDATE and handled event by event: at or below its revision,
 * skipped; above revision + 1, ProjectionGapError. Both the claim (UPDATE, INSERT) and the read
 * lock the row, so two appliers of one stream take turns and the second sees what the first did.
 *
 * On a pipelining client the usual case (every stream claimed: always so inline) costs one round
 * trip: the claim and every statement go out together behind a SAVEPOINT, as if the claim had
 * succeeded. If it did not, the statements are undone (ROLLBACK TO SAVEPOINT) before anything
 * else is sent, and the batch is applied the careful way.
 */
export async function applyProjections(
  db: Queryable,
  projections: readonly Projection[],
  events: readonly RecordedEvent[],
  options: ApplyOptions = {},
): Promise<Applied[]> {
  const mine = projections.map((projection) => events.filter((e) => projection.handles(e.stream)));
  const runs = new Map<string, Run>();
  projections.forEach((projection, i) => {
    for (const e of mine[i]!) {
      const key = runKey(projection.name, e.stream);
      const run = runs.get(key);
      runs.set(key, run ? { ...run, first: Math.min(run.first, e.revision), last: Math.max(run.last, e.revision) } : { projection, stream: e.stream, first: e.revision, last: e.revision });
    }
  });
  if (runs.size === 0) return projections.map(() => ({ applied: 0, skipped: 0, messages: 0 }));
  const batch: Batch = { db, projections, mine, options, pipelined: (db as { pipeline?: boolean }).pipeline === true };
  if (batch.pipelined) {
    const applied = await applyAsClaimed(batch, [...runs.values()]);
    if (applied !== undefined) return applied;
  }
  return applyCarefully(batch, runs);
}

interface Batch {
  readonly db: Queryable;
  readonly projections: readonly Projection[];
  /** Per projection, the batch's events of its streams. */
  readonly mine: readonly (readonly RecordedEvent[])[];
  readonly options: ApplyOptions;
  readonly pipelined: boolean;
}

const claim = (db: Queryable, runs: readonly Run[]) =>
  db.query<{ projection: string; stream: string }>({
    name: 'jobledger_projection_claim',
    text: CLAIM_SQL,
    values: [runs.map((r) => r.projection.name), runs.map((r) => r.stream), runs.map((r) => r.first), runs.map((r) => r.last)],
  });

/** Pipelined: the claim and every statement in one flight, undone unless every stream was claimed. */
async function applyAsClaimed(batch: Batch, runs: readonly Run[]): Promise<Applied[] | undefined> {
  const { db } = batch;
  const savepoint = db.query('SAVEPOINT jobledger_apply');
  const claimed = claim(db, runs);
  // Awaited below; a failure must not go unhandled if mapping throws first.
  savepoint.catch(() => undefined);
  claimed.catch(() => undefined);
  // Every stream where the batch begins, as a successful claim leaves it.
  const last = new Map(runs.map((r) => [runKey(r.projection.name, r.stream), r.first - 1]));
  const { sent, counts } = await sendStatements(batch, last);
  const settled = Promise.allSettled([savepoint, claimed, ...sent.map((st) => st.result)]);
  const { rows } = await claimed.catch(async (error: unknown) => {
    await settled;
    throw error;
  });
  if (rows.length !== runs.length) {
    // Nothing may be sent before the statements are undone: wait for all of them first.
    await settled;
    await db.query('ROLLBACK TO SAVEPOINT jobledger_apply');
    return undefined;
  }
  return finishBatch(batch, sent, counts);
}

/** One step at a time: claim, read the unclaimed streams, then the statements of what applies. */
async function applyCarefully(batch: Batch, runs: Map<string, Run>): Promise<Applied[]> {
  const { db } = batch;
  const { rows: claimed } = await claim(db, [...runs.values()]);
  // Where each stream stands before the batch: claimed ones at first - 1; the others as stored.
  const last = new Map<string, number>();
  for (const { projection, stream } of claimed) {
    const key = runKey(projection, stream);
    last.set(key, runs.get(key)!.first - 1);
    runs.delete(key);
  }
  const unclaimed = [...runs.values()];
  if (unclaimed.length > 0) {
    const { rows } = await db.query<{ projection: string; stream: string; revision: string }>(
      `SELECT p.projection, p.stream, p.revision FROM projection_streams p
       JOIN unnest($1::text[], $2::text[]) AS u (projection, stream) ON p.projection = u.projection AND p.stream = u.stream
       FOR UPDATE OF p`,
      [unclaimed.map((r) => r.projection.name), unclaimed.map((r) => r.stream)],
    );
    for (const r of unclaimed) last.set(runKey(r.projection.name, r.stream), -1);
    for (const row of rows) last.set(runKey(row.projection, row.stream), Number(row.revision));
  }
  const stored = new Map(unclaimed.map((r) => [runKey(r.projection.name, r.stream), last.get(runKey(r.projection.name, r.stream))!]));
  const { sent, counts } = await sendStatements(batch, last);
  const results = await finishBatch(batch, sent, counts);
  // Unclaimed streams that moved on: record where they are now.
  const moved = unclaimed.filter((r) => last.get(runKey(r.projection.name, r.stream))! > stored.get(runKey(r.projection.name, r.stream))!);
  if (moved.length > 0) {
    await db.query(
      `INSERT INTO projection_streams (projection, stream, revision)
       SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
       ON CONFLICT (projection, stream) DO UPDATE SET revision = GREATEST(projection_streams.revision, excluded.revision)`,
      [moved.map((r) => r.projection.name), moved.map((r) => r.stream), moved.map((r) => last.get(runKey(r.projection.name, r.stream))!)],
    );
  }
  return results;
}

/**
 * Maps and issues the statements of every event above its stream's revision in `last` (which it
 * moves on). A pipelining client gets them all before any result is awaited (finishBatch checks
 * them in order): they go out together, about one round trip, all before the caller can issue a
 * ROLLBACK. Any other client gets them one at a time, each checked before the next is issued: a
 * statement must never be issued after the caller gave up on the transaction, or it would run
 * outside it.
 */
async function sendStatements(batch: Batch, last: Map<string, number>): Promise<{ sent: SentStatement[]; counts: { applied: number; skipped: number }[] }> {
  const { db, projections, mine, pipelined } = batch;
  const sent: SentStatement[] = [];
  const counts = projections.map(() => ({ applied: 0, skipped: 0 }));
  for (const [i, projection] of projections.entries()) {
    const project = projection.forBatch ? projection.forBatch(mine[i]!.map(projected)) : (pe: ProjectedEvent) => projection.project(pe);
    for (const e of mine[i]!) {
      const key = runKey(projection.name, e.stream);
      const before = last.get(key)!;
      if (e.revision <= before) {
        counts[i]!.skipped++;
        continue;
      }
      if (e.revision !== before + 1) throw new ProjectionGapError(projection.name, e.stream, before, e.revision);
      const pe = projected(e);
      for (const s of project(pe)) {
        const result = db.query<{ queue: string; message: unknown }>({ name: statementName(s.text), text: s.text, values: s.values as unknown[] });
        // Checked again in finishBatch; a rejection must not go unhandled meanwhile.
        result.catch(() => undefined);
        const statement = { projection: projection.name, e, eventType: pe.event.type, s, result };
        if (!pipelined) await check(statement);
        sent.push(statement);
      }
      last.set(key, e.revision);
      counts[i]!.applied++;
    }
  }
  return { sent, counts };
}

/** Checks every statement in order, then sends the messages they returned. */
async function finishBatch(batch: Batch, sent: readonly SentStatement[], counts: readonly { applied: number; skipped: number }[]): Promise<Applied[]> {
  const outboxes = new Map<string, { queue: string; message: unknown }[]>();
  for (const statement of sent) {
    const rows = await check(statement);
    if (statement.s.emits === 'messages') outboxes.set(statement.projection, [...(outboxes.get(statement.projection) ?? []), ...rows]);
  }
  const results: Applied[] = [];
  for (const [i, projection] of batch.projections.entries()) {
    const outbox = outboxes.get(projection.name) ?? [];
    if (outbox.length > 0) await sendAll(projection.name, outbox, batch.options.send, batch.db);
    results.push({ ...counts[i]!, messages: outbox.length });
  }
  return results;
}

interface SentStatement {
  readonly projection: string;
  readonly e: RecordedEvent;
  readonly eventType: string;
  readonly s: Statement;
  readonly result: Promise<pg.QueryResult<{ queue: string; message: unknown }>>;
}

/** A statement's rows, once it touched as many rows as its projection said it must. */
const check = async ({ projection, e, eventType, s, result }: SentStatement) => {
  const { rows, rowCount } = await result;
  const count = s.emits ? rows.length : (rowCount ?? 0);
  if (s.expectRows !== undefined && count !== s.expectRows) throw new ProjectionStatementError(projection, e.stream, e.revision, eventType, s.expectRows, count);
  return rows;
};

// Projections map each event type to a few fixed texts: preparing them once per connection (a
// named statement; the name is the text's hash, so one name never means two texts) saves their
// planning on every append.
const names = new Map<string, string>();
const statementName = (text: string): string => {
  let name = names.get(text);
  if (name === undefined) {
    name = `jobledger_p_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`;
    if (names.size < 10_000) names.set(text, name);
  }
  return name;
};

// $1 projections, $2 streams, $3 first and $4 last revision of each stream in the batch. Returns
// the (projection, stream) rows claimed: moved from first - 1 to last, or created at last when
// the batch starts the stream. A row another transaction holds is waited for, then re-checked on
// its new version (READ COMMITTED), so a stream applied meanwhile is not claimed.
const CLAIM_SQL = `
WITH batch AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[]) AS b (projection, stream, first, last)
),
moved AS (
  UPDATE projection_streams p SET revision = batch.last FROM batch
  WHERE p.projection = batch.projection AND p.stream = batch.stream AND p.revision = batch.first - 1
  RETURNING p.projection, p.stream
),
created AS (
  INSERT INTO projection_streams (projection, stream, revision)
  SELECT projection, stream, last FROM batch WHERE first = 0
  ON CONFLICT (projection, stream) DO NOTHING
  RETURNING projection, stream
)
SELECT projection, stream FROM moved UNION ALL SELECT projection, stream FROM created`;

/** One send per run of consecutive messages to the same queue, so the queue's ids follow the admissions' order. */
const sendAll = async (projection: string, outbox: readonly { queue: string; message: unknown }[], send: SendMessages | undefined, db: Queryable) => {
  if (send === undefined) throw new Error(`projection ${projection} emits messages but its runner was given no SendMessages`);
  for (let i = 0; i < outbox.length; ) {
    const queue = outbox[i]!.queue;
    let j = i;
    while (j < outbox.length && outbox[j]!.queue === queue) j++;
    await send(db, queue, outbox.slice(i, j).map((m) => m.message));
    i = j;
  }
};

/**
 * An InlineHandler for PostgresEventStore: applies the projections, in order, to the events of the
 * append inside its transaction (so a failure rolls the append back, and a deadlock retry applies
 * them again in the new transaction: everything goes through `client`). No global checkpoint is
 * written: one row shared by every append would serialise them all; the stream revisions suffice.
 */
export const inlineProjections =
  (projections: readonly Projection[], options: ApplyOptions = {}) =>
  async (client: Queryable, events: readonly RecordedEvent[]): Promise<void> => {
    await applyProjections(client, projections, events, options);
  };

/** Runs `fn` in a transaction on a client of the pool: COMMIT if it returns, ROLLBACK if it throws. */
export async function inTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
    try {
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK').catch(() => (broken = true));
      throw error;
    }
  } finally {
    client.release(broken);
  }
}

/**
 * Applies a batch and (if given) moves the projection's checkpoint to `checkpoint`, in one
 * transaction. The checkpoint never moves back: applying an old batch again changes nothing.
 */
export const applyBatch = (
  pool: pg.Pool,
  projection: Projection,
  events: readonly RecordedEvent[],
  options: ApplyOptions & { readonly checkpoint?: GlobalPosition } = {},
): Promise<Applied> =>
  inTransaction(pool, async (client) => {
    const applied = await applyEvents(client, projection, events, options);
    if (options.checkpoint) await saveCheckpoint(client, projection.name, options.checkpoint);
    return applied;
  });

/** The projection's checkpoint; START when it has none. */
export async function loadCheckpoint(db: Queryable, projection: string): Promise<GlobalPosition> {
  const { rows } = await db.query<{ commit: string; prepare: string }>(
    'SELECT commit::text AS commit, prepare::text AS prepare FROM projection_checkpoints WHERE projection = $1',
    [projection],
  );
  const row = rows[0];
  return row === undefined ? START : { commit: BigInt(row.commit), prepare: BigInt(row.prepare) };
}

/** Moves the checkpoint forward to `to` (never back); true if it moved. */
export async function saveCheckpoint(db: Queryable, projection: string, to: GlobalPosition, options: { readonly force?: boolean } = {}): Promise<boolean> {
  const result = await db.query(
    `INSERT INTO projection_checkpoints AS c (projection, commit, prepare) VALUES ($1, $2::numeric, $3::numeric)
     ON CONFLICT (projection) DO UPDATE SET commit = excluded.commit, prepare = excluded.prepare, updated_at = statement_timestamp()
     WHERE $4 OR (c.commit, c.prepare) < (excluded.commit, excluded.prepare)`,
    [projection, to.commit.toString(), to.prepare.toString(), options.force === true],
  );
  return (result.rowCount ?? 0) > 0;
}

/** The session advisory lock that makes one async runner (or a rebuild) the projection's only applier. */
export const projectionLockSql = (param: number): string => `hashtextextended('jobledger:projection:' || $${param}, 0)`;

export interface AsyncProjectionRunnerOptions extends ApplyOptions {
  readonly pool: pg.Pool;
  readonly store: EventStore;
  readonly projection: Projection;
  /** Only streams with this prefix are read (default: all; the projection passes over those it does not handle). */
  readonly streamPrefix?: string;
  /** Events per transaction (default 500). */
  readonly batchSize?: number;
  /** Subscription polling when no notification arrives (default 500 ms). */
  readonly pollIntervalMs?: number;
  /** How often a runner without the lock tries again, and the pause after a failure (default 1000 ms). */
  readonly retryMs?: number;
  readonly logger?: Logger;
}

/** The runner's lock connection was lost, or another runner moved the checkpoint: it stops applying. */
export class LeadershipLostError extends Error {
  override readonly name = 'LeadershipLostError';
}

/**
 * Async mode: a catch-up subscription from the projection's checkpoint; each batch and the
 * checkpoint are written in one transaction. Exactly one runner per projection applies at a
 * time: the one holding a session advisory lock on a dedicated connection. The others try again
 * every `retryMs` and take over (from the stored checkpoint) when the holder stops or its
 * connection drops. A failing batch (or read) ends the subscription; the runner lets the lock go,
 * pauses and starts over, so a transient failure costs a retry, and a permanent one is logged
 * each time.
 */
export class AsyncProjectionRunner {
  private loop: Promise<void> | undefined;
  private stopping = false;
  private leading = false;
  private wake: (() => void) | undefined;
  private readonly log: Logger;

  constructor(private readonly options: AsyncProjectionRunnerOptions) {
    this.log = (options.logger ?? silentLogger).child({ projection: options.projection.name });
  }

  /** Whether this runner holds the projection's lock and is applying. */
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
    const { projection, retryMs = 1_000 } = this.options;
    while (!this.stopping) {
      const lock = new pg.Client(this.options.pool.options);
      let subscription: Subscription | undefined;
      let lost!: (error: Error) => void;
      const connectionLost = new Promise<never>((_, reject) => (lost = reject));
      connectionLost.catch(() => undefined);
      lock.on('error', (error) => lost(error));
      lock.on('end', () => lost(new LeadershipLostError('lock connection ended')));
      try {
        await lock.connect();
        const { rows } = await lock.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
        const pid = rows[0]!.pid;
        while (!this.stopping && !(await this.tryLock(lock))) await this.pause(retryMs);
        if (this.stopping) return;
        this.leading = true;
        const after = await loadCheckpoint(this.options.pool, projection.name);
        this.log.info({ commit: after.commit.toString(), prepare: after.prepare.toString() }, 'projection runner leading');
        const stopped = new Promise<void>((resolve) => (this.wake = resolve));
        if (this.stopping) return;
        subscription = this.options.store.subscribe(
          {
            after,
            batchSize: this.options.batchSize ?? 500,
            pollIntervalMs: this.options.pollIntervalMs ?? 500,
            ...(this.options.streamPrefix === undefined ? {} : { streamPrefix: this.options.streamPrefix }),
          },
          (events) => this.applyLeading(events, pid),
        );
        await Promise.race([subscription.done, connectionLost, stopped]);
      } catch (error) {
        if (!this.stopping) {
          this.log.warn({ err: error }, 'projection runner failed; retrying');
          await this.pause(retryMs);
        }
      } finally {
        this.leading = false;
        await subscription?.stop();
        // Ending the session lets the lock go.
        await lock.end().catch(() => undefined);
      }
    }
  }

  private async tryLock(lock: pg.Client): Promise<boolean> {
    const { rows } = await lock.query<{ ok: boolean }>(`SELECT pg_try_advisory_lock(${projectionLockSql(1)}) AS ok`, [this.options.projection.name]);
    return rows[0]!.ok;
  }

  /**
   * One batch and the checkpoint, in one transaction. The checkpoint moves only while this
   * runner's lock connection (pid) still holds the lock, so a runner that lost it (and may
   * already have a successor) writes nothing.
   */
  private applyLeading(events: readonly RecordedEvent[], pid: number): Promise<void> {
    const { pool, projection } = this.options;
    const to = events.at(-1)!.position;
    return inTransaction(pool, async (client) => {
      await applyEvents(client, projection, events, this.options);
      const result = await client.query(
        `INSERT INTO projection_checkpoints AS c (projection, commit, prepare)
         SELECT $1, $2::numeric, $3::numeric
         WHERE EXISTS (
           SELECT FROM pg_locks l, (SELECT ${projectionLockSql(1)} AS k) h
           WHERE l.locktype = 'advisory' AND l.granted AND l.pid = $4 AND l.objsubid = 1
             AND l.classid = ((h.k >> 32) & 4294967295)::oid AND l.objid = (h.k & 4294967295)::oid
         )
         ON CONFLICT (projection) DO UPDATE SET commit = excluded.commit, prepare = excluded.prepare, updated_at = statement_timestamp()
         WHERE (c.commit, c.prepare) < (excluded.commit, excluded.prepare)`,
        [projection.name, to.commit.toString(), to.prepare.toString(), pid],
      );
      if (result.rowCount !== 1) throw new LeadershipLostError(`projection ${projection.name}: lock lost or checkpoint moved by another runner`);
    });
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

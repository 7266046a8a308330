import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { KeyEvent } from '../domain/events.js';
import type { HandedOffJob } from '../domain/ports/ledger-store.js';
import type { GlobalPosition, RecordedEvent } from '../domain/ports/event-store.js';
import { decodeRecorded } from '../domain/recorded.js';
import { saveCheckpoint } from './checkpoint.js';
import { keyOfStream, type ProjectedEvent, type Projection, type Statement } from './projection.js';
import { inTransaction, type Queryable } from './transaction.js';

// Applies projections (./projection.ts) to batches of events. Three ways to run the same code:
// - inline: the key writer's transaction applies `projectAll(...)` right after its appends
//   (src/adapters/eventstore/postgres/write-transaction.ts): the read models and the messages
//   commit with the events, so they can neither lag nor be applied twice;
// - async: `AsyncProjectionRunner` (./runner.ts), a catch-up subscription whose batches (whole
//   transactions) and checkpoint commit together, one active runner per projection (./leader.ts);
// - rebuild: ./rebuild.ts, from position zero into emptied tables.
// A database is projected one way: projections applied both inline and async would apply each
// event twice (src/adapters/postgres/projection-mode.ts records which).

/** A recorded event as a projection sees it (decoded: an event that does not decode fails the batch). */
export const toProjected = (e: RecordedEvent, event: KeyEvent = decodeRecorded(e)): ProjectedEvent => ({
  event,
  stream: e.stream,
  revision: e.revision,
  key: keyOfStream(e.stream),
  commit: e.position.commit,
});

/** Every projection's statements for the batch, in projection order: a later one may read what an earlier one wrote. */
export const projectAll = (projections: readonly Projection[], events: readonly ProjectedEvent[]): Statement[] =>
  projections.flatMap((p) => {
    const mine = events.filter((e) => p.handles(e.stream));
    return mine.length === 0 ? [] : [...p.project(mine)];
  });

// Projections use a few fixed texts: preparing each once per connection (a named statement; the
// name is the text's hash, so one name never means two texts) saves its planning on every batch.
const names = new Map<string, string>();
export const statementName = (text: string): string => {
  let name = names.get(text);
  if (name === undefined) {
    name = `jobledger_p_${createHash('sha1').update(text).digest('hex').slice(0, 20)}`;
    if (names.size < 10_000) names.set(text, name);
  }
  return name;
};

export const send = (db: Queryable, s: Statement) => db.query({ name: statementName(s.text), text: s.text, values: s.values as unknown[] });

/**
 * Runs the statements through `db`, which MUST be inside a transaction the caller ends, in order:
 * all at once on a pipelining client (one round trip), one after the other otherwise (a statement
 * must never be issued after the caller gave up on the transaction). Returns the jobs the
 * 'handedOff' statements describe.
 */
export async function applyStatements(db: Queryable, statements: readonly Statement[]): Promise<HandedOffJob[]> {
  const handedOff: HandedOffJob[] = [];
  const collect = (s: Statement, rows: readonly unknown[]) => {
    if (s.returns === 'handedOff') handedOff.push(...(rows as HandedOffJob[]));
  };
  if ((db as { pipeline?: boolean }).pipeline === true) {
    const results = statements.map((s) => send(db, s));
    // Awaited in order below; a failure must not go unhandled while an earlier one is awaited.
    for (const r of results) r.catch(() => undefined);
    for (const [i, r] of results.entries()) collect(statements[i]!, (await r).rows);
  } else {
    for (const s of statements) collect(s, (await send(db, s)).rows);
  }
  return handedOff;
}

/** Applies recorded events (whole transactions, in global order) to the projections through `db`, inside the caller's transaction. */
export const applyEvents = (db: Queryable, projections: readonly Projection[], events: readonly RecordedEvent[]): Promise<HandedOffJob[]> =>
  applyStatements(db, projectAll(projections, events.map((e) => toProjected(e))));

/**
 * Applies a batch and (if given) moves the checkpoint `name` to `checkpoint`, in one transaction.
 * The checkpoint never moves back.
 */
export const applyBatch = (
  pool: pg.Pool,
  projections: readonly Projection[],
  events: readonly RecordedEvent[],
  options: { readonly checkpoint?: { readonly name: string; readonly to: GlobalPosition } } = {},
): Promise<void> =>
  inTransaction(pool, async (client) => {
    await applyEvents(client, projections, events);
    if (options.checkpoint) await saveCheckpoint(client, options.checkpoint.name, options.checkpoint.to);
  });

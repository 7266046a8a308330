import { expect } from 'vitest';
import type pg from 'pg';
import type { GlobalPosition } from '../../src/domain/ports/event-store.js';

// Events no decoder takes, appended behind the ledger's back (as an operator's SQL, or a newer
// release, would): issue 10's two cases. Both are at the next revision of a stream that exists,
// each a row of its own (migration 16: a row of appends holds one append's events).

export const BAD_EVENTS = {
  'an unknown type': { type: 'JobTeleported', data: { jobId: 'nobody', at: 1 } },
  'a known type missing a field': { type: 'JobCompleted', data: { jobId: 'nobody', at: 1 } },
} as const;

export type BadCase = keyof typeof BAD_EVENTS;
export const BAD_CASES = Object.keys(BAD_EVENTS) as BadCase[];

export interface Placed {
  readonly stream: string;
  readonly revision: number;
  readonly position: GlobalPosition;
}

/**
 * Appends one event to a stream with a streams row by SQL (a row of one event in appends), moving
 * the stream's revision as an append would; `data`: SQL for its payload ($1 is the stream).
 */
const appendOneByHand = async (pool: pg.Pool, stream: string, type: string, data: string, values: unknown[] = []): Promise<Placed> => {
  const { rows } = await pool.query<{ revision: string; position: string; commit: string }>(
    `WITH s AS (UPDATE streams SET revision = revision + 1, transaction_id = pg_current_xact_id() WHERE stream = $1 RETURNING revision)
     INSERT INTO appends (stream, revision, types, ids, data) SELECT $1, s.revision, ARRAY[$2], ARRAY[gen_random_uuid()], jsonb_build_array(${data}) FROM s
     RETURNING revision, (position << 20)::text AS position, transaction_id::text AS commit`,
    [stream, type, ...values],
  );
  const row = rows[0];
  if (row === undefined) throw new Error(`no stream ${stream}`);
  return { stream, revision: Number(row.revision), position: { commit: BigInt(row.commit), prepare: BigInt(row.position) } };
};

/** The data of the stream's first KeyLimitSet (SQL; $1 is the stream). */
const FIRST_LIMIT = `(SELECT data FROM events WHERE stream = $1 AND type = 'KeyLimitSet' ORDER BY stream_revision LIMIT 1)`;

/** Appends the bad event to `stream` by SQL, moving the stream's revision as an append would. */
export const appendByHand = (pool: pg.Pool, stream: string, bad: BadCase): Promise<Placed> => {
  const { type, data } = BAD_EVENTS[bad];
  return appendOneByHand(pool, stream, type, '$3::jsonb', [JSON.stringify(data)]);
};

/**
 * What an operator would do: make the event one that decodes and changes nothing, a copy of the
 * stream's first KeyLimitSet (the same limit again).
 */
export const fixByHand = async (pool: pg.Pool, placed: Placed): Promise<void> => {
  const { rowCount } = await pool.query(
    `UPDATE appends SET types = ARRAY['KeyLimitSet'], data = jsonb_build_array(${FIRST_LIMIT})
     WHERE stream = $1 AND revision = $2 AND cardinality(types) = 1`,
    [placed.stream, placed.revision],
  );
  if (rowCount !== 1) throw new Error(`no event at ${placed.stream} ${placed.revision}`);
};

/** The error an EventDecodeError must carry for the placed event: stream, revision, position, in its fields and its message. */
export const namesPlace = (placed: Placed) => ({
  name: 'EventDecodeError',
  stream: placed.stream,
  revision: placed.revision,
  position: placed.position,
  message: expect.stringContaining(`${JSON.stringify(placed.stream)} revision ${placed.revision} (global position ${placed.position.commit}/${placed.position.prepare})`),
});

/** The reader's rows of jl_quarantined. */
export const quarantineRows = async (pool: pg.Pool, reader?: string) =>
  (
    await pool.query<{ stream: string; reader: string; revision: string; position: string; commit_id: string; error: string }>(
      `SELECT stream, reader, revision, position, commit_id::text AS commit_id, error FROM jl_quarantined ${reader === undefined ? '' : 'WHERE reader = $1'} ORDER BY stream, reader`,
      reader === undefined ? [] : [reader],
    )
  ).rows.map((r) => ({ stream: r.stream, reader: r.reader, revision: Number(r.revision), position: { commit: BigInt(r.commit_id), prepare: BigInt(r.position) }, error: r.error }));

/** Appends by SQL an event that decodes after the bad one: the key's KeyLimitSet again, with limit 2 (held back with the bad event, applied once it decodes). */
export const appendLimitTwo = async (pool: pg.Pool, stream: string): Promise<void> => {
  await appendOneByHand(pool, stream, 'KeyLimitSet', `${FIRST_LIMIT} || '{"limit": 2}'`);
};

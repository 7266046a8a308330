import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { inTransaction } from '../../projections/transaction.js';
import { ADVISORY_SQL, LOCK_ROWS_SQL, isJobStream } from '../eventstore/postgres/stream-sql.js';
import { FINISHED, MOVED_FIGURES, ROW_FIGURES, doomedRow, type Moved } from './archive-rows.js';
import { isPgError } from '../eventstore/postgres/write-errors.js';

// Retention by partition (issue 22, lever 4; migration 17): a week of `appends` whose last day
// ended before the cut leaves the live ledger whole. Its rows that name a job not finished before
// the cut (or a key's own event: a limit, a pause) are moved on to the current week first; then
// the week's partition is detached from `appends` and attached to `appends_archive` in one
// transaction, without a row written: the week's other rows are its archived rows, where they
// lie. Every reader of history reads both tables (ledger_appends), so a key's state, `state
// --at`, the audit and `replay --verify` answer as before.

/** A week partition of appends: its table and its bounds (dates, Mondays). */
export interface Week {
  readonly partition: string;
  readonly from: string;
  readonly to: string;
}

// A partition name goes into statements as an identifier: only the names migration 17 gives.
const WEEK_PARTITION = /^appends_(before_)?w\d{8}$/;

/** The week partitions of appends (appends_wYYYYMMDD, appends_before_wYYYYMMDD) and their bounds, from the catalog. */
const LIVE_WEEKS = `
SELECT c.relname AS partition, b.m[1] AS "from", b.m[2] AS "to"
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid), $$FROM \\('([^']+)'\\) TO \\('([^']+)'\\)$$) AS m) b
WHERE i.inhparent = 'appends'::regclass AND b.m IS NOT NULL`;

/** The week partitions of appends that end by `monday`, oldest first. */
export const weeksEndingBy = async (pool: pg.Pool, monday: string): Promise<Week[]> =>
  (await pool.query<Week>(`SELECT * FROM (${LIVE_WEEKS}) w WHERE "to"::date <= $1::date ORDER BY "from"::date`, [monday])).rows.filter((w) => WEEK_PARTITION.test(w.partition));

/**
 * Where a run that archives the weeks ending by `monday` moves on what must stay live: the first
 * week it leaves (the oldest partition ending after `monday`; for the partition of the weeks
 * before migration 17, `monday` itself, which it holds).
 */
export const moveOnWeek = async (pool: pg.Pool, monday: string): Promise<string> =>
  (
    await pool.query<{ week: string }>(
      `SELECT to_char(greatest("from"::date, $1::date), 'YYYY-MM-DD') AS week FROM (${LIVE_WEEKS}) w WHERE "to"::date > $1::date ORDER BY "from"::date LIMIT 1`,
      [monday],
    )
  ).rows[0]?.week ?? monday;

/** The rows of a week that must stay live: some event names no job finished before $1 (epoch ms; $2: FINISHED). */
const staying = (week: Week): string => `FROM ${week.partition} a WHERE NOT ${doomedRow('$1', '$2')}`;

/** What archiving the week would move, and how many of its rows would move on first. */
export const countWeek = async (pool: pg.Pool, week: Week, before: number): Promise<Moved & { movedOn: number }> => {
  const { rows } = await pool.query<Moved & { movedOn: number }>(
    `WITH doomed AS (SELECT ${ROW_FIGURES} FROM ${week.partition} a WHERE ${doomedRow('$1', '$2')}) ${MOVED_FIGURES('doomed')},
       (SELECT count(*)::int ${staying(week)}) AS "movedOn"`,
    [before, FINISHED],
  );
  return rows[0]!;
};

// This MUST stay one statement a batch: a row leaves the week and enters the week $4 in a step,
// under its stream's locks, so no reader finds it twice or not at all. The row keeps its
// position, created and events: only its week changes. $4 is the first week this run leaves live
// (moveOnWeek), never a later one: a job stream's rows must stay in weeks that do not go back in
// revision order, so that its archived rows are always its first ones (the readers of a job
// stream read the archive only below its first live row: stream-sql.ts rowsAfter). Guarded by
// test/adapters/postgres/archive-weeks.int.test.ts ("a job stream … across weeks").
const MOVE_ON_SQL = (week: Week): string => `
UPDATE appends a SET week = $4::date
WHERE a.stream = ANY($1::text[]) AND a.week >= '${week.from}' AND a.week < '${week.to}' AND NOT ${doomedRow('$2', '$3')}`;

/** Moves the week's rows that must stay live on to the week `to`, a few streams per transaction (the key writer's lock order). */
const moveOn = async (pool: pg.Pool, week: Week, to: string, before: number, streamsPerBatch: number): Promise<number> => {
  const streams = (await pool.query<{ stream: string }>(`SELECT DISTINCT a.stream ${staying(week)} ORDER BY 1`, [before, FINISHED])).rows.map((r) => r.stream);
  let moved = 0;
  for (let i = 0; i < streams.length; i += streamsPerBatch) {
    const batch = streams.slice(i, i + streamsPerBatch);
    moved += await inTransaction(pool, async (client) => {
      const jobs = batch.filter(isJobStream);
      if (jobs.length > 0) await client.query(ADVISORY_SQL, [jobs]);
      await client.query(LOCK_ROWS_SQL, [batch.filter((s) => !isJobStream(s))]);
      return (await client.query(MOVE_ON_SQL(week), [batch, before, FINISHED, to])).rowCount ?? 0;
    });
  }
  return moved;
};

// A key stream whose rows leave for the archive tells its writer's lock to read the archive for
// a state built from before them (streams.archived_revision), BEFORE they leave: a mark ahead of
// the rows only costs a read of the archive that finds nothing yet. Locked in name order, as the
// key writer locks.
const MARK_SQL = `
WITH w AS (SELECT * FROM unnest($1::text[], $2::bigint[]) AS w (stream, revision)),
locked AS (SELECT s.stream FROM streams s WHERE s.stream = ANY($1::text[]) ORDER BY s.stream FOR UPDATE)
UPDATE streams s SET archived_revision = greatest(coalesce(s.archived_revision, -1), w.revision)
FROM w WHERE s.stream = w.stream AND s.stream IN (SELECT stream FROM locked)`;

const markArchived = async (pool: pg.Pool, week: Week): Promise<void> => {
  const { rows } = await pool.query<{ stream: string; revision: string }>(
    `SELECT stream, max(last_revision)::text AS revision FROM ${week.partition} WHERE NOT starts_with(stream, 'job:') GROUP BY stream ORDER BY stream`,
  );
  for (let i = 0; i < rows.length; i += 500) {
    const batch = rows.slice(i, i + 500);
    await inTransaction(pool, (client) => client.query(MARK_SQL, [batch.map((r) => r.stream), batch.map((r) => r.revision)]));
  }
};

/** Lock waits before a schema change of the week gives up and tries again: it waits for the ledger's running transactions, and they wait for it. */
const LOCK_TRIES = 10;

/**
 * Runs `fn` in a transaction that waits at most 2 s for its locks, again (up to LOCK_TRIES, a
 * growing pause between) while the wait times out: an ALTER TABLE waiting for a lock holds back
 * every statement on appends that comes after it, so it must not wait behind a long transaction
 * on the ledger (a rebuild, a report) for long.
 */
const withShortLockWaits = async (pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<void>): Promise<void> => {
  for (let attempt = 1; ; attempt++) {
    try {
      await inTransaction(pool, async (client) => {
        await client.query(`SET LOCAL lock_timeout = '2s'`);
        await fn(client);
      });
      return;
    } catch (error) {
      // lock_not_available: let the long transaction pass.
      if (!(isPgError(error) && error.code === '55P03') || attempt === LOCK_TRIES) throw error;
      await sleep(500 * attempt);
    }
  }
};

/**
 * Archives one week: moves on what must stay live, marks its key streams, and moves the
 * partition from appends to appends_archive. Returns what it archived.
 */
export const archiveWeek = async (pool: pg.Pool, week: Week, to: string, before: number, streamsPerBatch: number): Promise<Moved & { movedOn: number }> => {
  const movedOn = await moveOn(pool, week, to, before, streamsPerBatch);
  await markArchived(pool, week);
  // Nothing writes the week any more: its figures are read now, not under the detach's lock.
  const figures = (await pool.query<Moved & { rows: number }>(`WITH w AS (SELECT ${ROW_FIGURES} FROM ${week.partition} a) ${MOVED_FIGURES('w')}, (SELECT count(*) FROM w)::int AS rows`)).rows[0]!;
  // The bound as a validated constraint: ATTACH then needs no scan of the week. Added NOT VALID
  // (a moment's lock of the week) and validated apart (a lock that blocks no read or write).
  const check = `${week.partition}_week`;
  await withShortLockWaits(pool, async (client) => {
    await client.query(`ALTER TABLE ${week.partition} DROP CONSTRAINT IF EXISTS ${check}, ADD CONSTRAINT ${check} CHECK (week >= '${week.from}' AND week < '${week.to}') NOT VALID`);
  });
  await pool.query(`ALTER TABLE ${week.partition} VALIDATE CONSTRAINT ${check}`);
  // This MUST stay one transaction: the week leaves appends and enters appends_archive in one step
  // (DETACH holds appends' ACCESS EXCLUSIVE lock to the COMMIT), so every reader finds its rows in
  // exactly one of the two; and it MUST read no rows, which would hold that lock for a scan.
  // Guarded by test/adapters/postgres/archive-weeks.int.test.ts.
  await withShortLockWaits(pool, async (client) => {
    await client.query(`ALTER TABLE appends DETACH PARTITION ${week.partition}`);
    await client.query(`ALTER TABLE appends_archive ATTACH PARTITION ${week.partition} FOR VALUES FROM ('${week.from}') TO ('${week.to}')`);
    await client.query(`COMMENT ON TABLE ${week.partition} IS 'The rows of appends inserted in the weeks from ${week.from} to ${week.to} (UTC), archived whole by jobledger archive (jl_archived_weeks): a partition of appends_archive.'`);
    await client.query(
      `INSERT INTO jl_archived_weeks (week_partition, week_from, week_to, cut, rows, events, moved_on)
       VALUES ($1, $2, $3, to_timestamp($4::float8 / 1000), $5, $6, $7)`,
      [week.partition, week.from, week.to, before, figures.rows, figures.events, movedOn],
    );
  });
  return { jobs: figures.jobs, events: figures.events, bytes: figures.bytes, streams: figures.streams, movedOn };
};

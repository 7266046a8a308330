import type pg from 'pg';
import { isDistributed } from './distribution.js';
import { withClient } from '../../projections/with-client.js';
import { archiveRows, type Moved } from './archive-rows.js';
import { archiveWeek, countWeek, moveOnWeek, weeksEndingBy } from './archive-weeks.js';
import { ensureAppendWeeks } from './append-weeks.js';

// Retention: `jobledger archive --before T` moves the events of jobs finished before T out of the
// live ledger (appends) into its archive (appends_archive), and nothing any reader of history
// answers changes (every reader reads both: the view ledger_appends). By week (issue 22, lever
// 4): every week that ended by T's Monday leaves whole, its partition moved from one table to the
// other (./archive-weeks.ts), after the rows that must stay live (an unfinished job's, a key's
// own) were moved on to the first week it leaves live. With `exact`, every other archivable row moves too, row by row
// (./archive-rows.ts), as archive did before migration 17: the cut is then T itself, at the
// cost of a row deleted and one inserted per row.

export interface ArchiveOptions {
  /** Epoch ms: jobs that finished before it are archived. */
  readonly before: number;
  /** Count what would move, move nothing. */
  readonly dryRun?: boolean;
  /** Archive the rows of weeks that end after the cut too (row by row), not only whole weeks. */
  readonly exact?: boolean;
  /** Streams per transaction (default 50) of a row-by-row move: each holds those streams' write locks while it moves their rows. */
  readonly streamsPerBatch?: number;
  /** Told after each week and each batch: what has moved so far. */
  readonly progress?: (sofar: Moved) => void;
}

export type { Moved } from './archive-rows.js';

export interface ArchiveResult extends Moved {
  /** Events left in the live table (for a dry run: that would be left). */
  readonly liveEvents: number;
  /** The week partitions archived whole (for a dry run: that would be), oldest first. */
  readonly weeks: readonly string[];
  /** The Monday (UTC, YYYY-MM-DD) before which whole weeks were archived: the Monday of T's week. */
  readonly weeksBefore: string;
  /** Rows of unfinished jobs (or a key's own) moved on out of the archived weeks to the first week left live. */
  readonly movedOn: number;
}

const add = (a: Moved, b: Moved): Moved => ({ jobs: a.jobs + b.jobs, events: a.events + b.events, bytes: a.bytes + b.bytes, streams: a.streams + b.streams });

/**
 * Archive is not built for a distributed ledger (Citus) yet: it moves the rows a week leaves live,
 * and a job's rows row by row, under row locks of streams on every shard at once, which Citus
 * refuses (a lock must stay on one shard). Refused before anything is read or moved.
 */
export class ArchiveDistributedError extends Error {
  override readonly name = 'ArchiveDistributedError';
  constructor() {
    super('archive: this ledger is distributed (Citus), and archive does not run on a distributed ledger yet: its events stay live (every reader reads them as before)');
  }
}

/** Archives (or, dry, counts) the events of the jobs that finished before `before`. One run at a time per ledger. */
export const archiveFinishedJobs = async (pool: pg.Pool, options: ArchiveOptions): Promise<ArchiveResult> => {
  if (await isDistributed(pool)) throw new ArchiveDistributedError();
  return withClient(pool, async (session) => {
    // Two runs at once would both try to move on and detach the same weeks.
    await session.query(`SELECT pg_advisory_lock(hashtextextended('jobledger:archive', 0))`);
    try {
      return await archive(pool, options);
    } finally {
      await session.query(`SELECT pg_advisory_unlock(hashtextextended('jobledger:archive', 0))`);
    }
  });
};

const archive = async (pool: pg.Pool, options: ArchiveOptions): Promise<ArchiveResult> => {
  const dryRun = options.dryRun === true;
  const streamsPerBatch = options.streamsPerBatch ?? 50;
  // The current week must have its partition before rows are moved on to it.
  if (!dryRun) await ensureAppendWeeks(pool);
  const { weeksBefore } = (
    await pool.query<{ weeksBefore: string }>(
      `SELECT to_char(date_trunc('week', least(to_timestamp($1::float8 / 1000), clock_timestamp()) AT TIME ZONE 'UTC'), 'YYYY-MM-DD') AS "weeksBefore"`,
      [options.before],
    )
  ).rows[0]!;
  const weeks = await weeksEndingBy(pool, weeksBefore);
  const to = weeks.length === 0 ? weeksBefore : await moveOnWeek(pool, weeksBefore);
  let total: Moved = { jobs: 0, events: 0, bytes: 0, streams: 0 };
  let movedOn = 0;
  for (const week of weeks) {
    const done = dryRun ? await countWeek(pool, week, options.before) : await archiveWeek(pool, week, to, options.before, streamsPerBatch);
    total = add(total, done);
    movedOn += done.movedOn;
    options.progress?.(total);
  }
  if (options.exact === true) {
    const rows = await archiveRows(pool, { before: options.before, weeksFrom: weeksBefore, dryRun, streamsPerBatch, progress: (sofar) => options.progress?.(add(total, sofar)) });
    total = add(total, rows);
  }
  const live = (await pool.query<{ n: number }>('SELECT coalesce(sum(cardinality(types)), 0)::int AS n FROM appends')).rows[0]!.n;
  return { ...total, liveEvents: dryRun ? live - total.events : live, weeks: weeks.map((w) => w.partition), weeksBefore, movedOn };
};

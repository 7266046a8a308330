import * as t from 'io-ts';
import { JobId, Key, Name, QueueName, ValidationError, checkField, refine } from '../../../domain/values.js';
import type { Queryable } from '../../../projections/transaction.js';
import { JOB_STATUSES, JOB_STATUS_FILTERS } from './job-statuses.js';
import { epochMs, toMs } from './sql.js';

/** The codec of a list of names: t.keyof of an object with those keys. */
const keyofList = <N extends string>(names: readonly N[], name: string) => t.keyof(Object.fromEntries(names.map((n) => [n, null])) as Record<N, null>, name);

/** A job's status in jl_jobs (JOB_STATUSES). */
export const JobStatus = keyofList(JOB_STATUSES, 'JobStatus');
export type JobStatus = t.TypeOf<typeof JobStatus>;

/** What the listing filters on (JOB_STATUS_FILTERS): a status, or `failed`, jobs waiting for a retry after a failed attempt. */
export const JobStatusFilter = keyofList(JOB_STATUS_FILTERS, 'JobStatusFilter');
export type JobStatusFilter = t.TypeOf<typeof JobStatusFilter>;

export interface JobFilter {
  readonly key?: string;
  /** The handler name. */
  readonly name?: string;
  readonly queue?: string;
  readonly status?: JobStatusFilter;
  /** Page size, 1 to 1000 (default 50). */
  readonly limit?: number;
  /** The nextCursor of the page before. */
  readonly cursor?: string;
}

export interface JobRow {
  readonly jobId: string;
  readonly key: string | null;
  readonly name: string;
  readonly queue: string;
  readonly status: JobStatus;
  readonly attempts: number;
  readonly maxAttempts: number;
  readonly priority: number;
  readonly enqueuedAt: number;
  readonly runAt: number | null;
  readonly startedAt: number | null;
  readonly finishedAt: number | null;
  readonly lastError: string | null;
  readonly finishReason: string | null;
  readonly workerId: string | null;
}

export interface JobPage {
  /** Newest first. */
  readonly jobs: JobRow[];
  /** Pass as `cursor` for the next page; null on the last one. */
  readonly nextCursor: string | null;
}

export const DEFAULT_PAGE = 50;
export const MAX_PAGE = 1_000;

const PageSize = refine(t.number, 'PageSize', (n) => Number.isSafeInteger(n) && n >= 1 && n <= MAX_PAGE, `must be an integer from 1 to ${MAX_PAGE}`);

/** Where the previous page ended: its last row's (enqueued_at, job_id), the order's keyset. */
type Position = readonly [enqueuedAt: number, jobId: string];

/**
 * The epoch ms both PostgreSQL's timestamptz (from 4714 BC) and a JS Date (to 275760 AD) hold: a
 * time outside them made to_timestamp() fail, a 500 for a crafted cursor (issue 21).
 */
const PG_MIN_MS = -210_866_803_200_000;
const DATE_MAX_MS = 8_640_000_000_000_000;
const CursorTime = refine(t.number, 'CursorTime', (n) => Number.isSafeInteger(n) && n >= PG_MIN_MS && n <= DATE_MAX_MS, 'must be a whole number of epoch ms');
// The job id as any job id is checked: a crafted cursor must not carry what PostgreSQL cannot store.
const PositionCodec = t.tuple([CursorTime, JobId]);

const encodeCursor = (p: Position): string => Buffer.from(JSON.stringify(p)).toString('base64url');

/**
 * The position a cursor of encodeCursor's names; anything else (bytes that are no base64url,
 * JSON of another shape, a time PostgreSQL cannot hold, a cursor that is not the one encodeCursor
 * writes for its position) is a ValidationError naming `cursor`, before any statement runs.
 */
const decodeCursor = (cursor: unknown): Position => {
  const text = checkField('cursor', t.string, cursor);
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    parsed = undefined;
  }
  // Buffer.from skips what is not base64url: only the very text this listing wrote is its cursor.
  if (!PositionCodec.is(parsed) || encodeCursor(parsed) !== text) throw new ValidationError('cursor', 'is not a cursor this listing returned');
  return parsed;
};

const COLUMNS = /* sql */ `
  job_id AS "jobId", key, name, queue, status, attempts, max_attempts AS "maxAttempts", priority::float8 AS priority,
  ${epochMs('enqueued_at')} AS "enqueuedAt", ${epochMs('run_at')} AS "runAt", ${epochMs('started_at')} AS "startedAt",
  ${epochMs('finished_at')} AS "finishedAt", last_error AS "lastError", finish_reason AS "finishReason", worker_id AS "workerId"`;

/**
 * The statement of a page of jobs (listJobs runs it): jl_jobs filtered by key, name, queue and
 * status (or `failed`), newest first (enqueued_at, then job_id, descending), one row more than the
 * page to tell whether another follows. Its WHERE depends on the filter, so it is a function, not a
 * constant (test/adapters/postgres/queries.int.test.ts EXPLAINs each filter's). Throws
 * ValidationError naming the field of a bad filter.
 */
export const listJobsQuery = (filter: JobFilter = {}): { readonly text: string; readonly values: unknown[]; readonly limit: number } => {
  if (typeof filter !== 'object' || filter === null) throw new ValidationError('filter', 'must be an object');
  const where: string[] = [];
  const values: unknown[] = [];
  const param = (value: unknown): string => `$${values.push(value)}`;
  // jl_jobs_key_recent walks one key's jobs newest first.
  if (filter.key !== undefined) where.push(`key = ${param(checkField('key', Key, filter.key))}`);
  if (filter.name !== undefined) where.push(`name = ${param(checkField('name', Name, filter.name))}`);
  if (filter.queue !== undefined) where.push(`queue = ${param(checkField('queue', QueueName, filter.queue))}`);
  if (filter.status !== undefined) {
    const status = checkField('status', JobStatusFilter, filter.status);
    // run_at is set exactly while a job is scheduled (jl_jobs_due): a failed one has used an attempt.
    where.push(status === 'failed' ? 'run_at IS NOT NULL AND attempts > 0' : `status = ${param(status)}`);
  }
  if (filter.cursor !== undefined) {
    const [enqueuedAt, jobId] = decodeCursor(filter.cursor);
    // The same conversion the projection stored enqueued_at with, so the row the cursor names compares equal.
    where.push(`(enqueued_at, job_id) < (to_timestamp(${param(enqueuedAt)}::float8 / 1000), ${param(jobId)})`);
  }
  const limit = filter.limit === undefined ? DEFAULT_PAGE : checkField('limit', PageSize, filter.limit);
  const text = `SELECT ${COLUMNS} FROM jl_jobs ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''}
     ORDER BY enqueued_at DESC, job_id DESC LIMIT ${param(limit + 1)}`;
  return { text, values, limit };
};

/** Jobs a page at a time with a keyset cursor: a page is the same however many jobs are enqueued meanwhile. Throws as listJobsQuery. */
export const listJobs = async (db: Queryable, filter: JobFilter = {}): Promise<JobPage> => {
  const { text, values, limit } = listJobsQuery(filter);
  const { rows } = await db.query<JobRow>(text, values);
  const jobs = rows.slice(0, limit).map((r) => ({
    ...r,
    enqueuedAt: toMs(r.enqueuedAt),
    runAt: toMs(r.runAt),
    startedAt: toMs(r.startedAt),
    finishedAt: toMs(r.finishedAt),
  }));
  const last = jobs[jobs.length - 1];
  return { jobs, nextCursor: rows.length > limit && last ? encodeCursor([last.enqueuedAt, last.jobId]) : null };
};

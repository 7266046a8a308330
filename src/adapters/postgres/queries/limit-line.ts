import { AHEAD_SHOWN, type LimitLine } from '../../../domain/explain.js';
import type { Queryable } from '../../../projections/transaction.js';
import { pauseJson, toPause, type KeyPause } from './pause.js';
import { epochMs, toMs } from './sql.js';

// A limit key's line as an explanation of one job shows it (domain/explain.ts LimitLine), from the
// read models instead of the key's state: a queue cap's key holds every waiting job of its queue,
// and loading its state (a 4 MB snapshot for 20,000 jobs) was most of `explain` on such a job
// (~450 ms of 650 on bench:reads' capped queue). Sound only where the read models are at the
// ledger's point: inline projections (written in the appending transaction), and no quarantine on
// the key (its read model is held back at the event that does not decode): the caller asks for
// inline, and a quarantined key answers nothing here, so it is loaded instead.
//
// One statement, so the figures, the line and the holders come from one snapshot. The line is the
// key's own parked jobs and its parked guests in promotion order (priority, then seq: both
// revisions of the key's stream, in the order the state numbers them), as in key-detail.ts.
// $1: the key's stream, $2: the job. Reads jl_keys (jl_keys_pkey), jl_parked (jl_jobs_parked),
// jl_limit_jobs (jl_limit_jobs_pkey), jl_slots (jl_jobs_holders), jl_quarantined (its pkey).
export const LIMIT_LINE_SQL = /* sql */ `
WITH line AS MATERIALIZED (
  SELECT p.job_id, p.priority, p.seq FROM jl_parked p WHERE p.stream = $1
  UNION ALL
  SELECT g.job_id, g.priority, g.seq FROM jl_limit_jobs g WHERE g.stream = $1 AND g.status = 'parked'
),
me AS MATERIALIZED (SELECT l.priority, l.seq FROM line l WHERE l.job_id = $2),
ahead AS MATERIALIZED (SELECT l.job_id, l.priority, l.seq FROM line l, me WHERE (l.priority, l.seq) < (me.priority, me.seq))
SELECT k.concurrency_limit AS "limit",
       ${pauseJson('k')} AS paused,
       (SELECT count(*) FROM line)::integer AS "lineLength",
       (SELECT count(*) FROM me)::integer AS "inLine",
       (SELECT count(*) FROM ahead)::integer AS "aheadCount",
       coalesce((SELECT json_agg(a.job_id ORDER BY a.priority, a.seq) FROM (SELECT * FROM ahead ORDER BY priority, seq LIMIT ${AHEAD_SHOWN}) a), '[]') AS ahead,
       coalesce((
         SELECT json_agg(h) FROM (
           SELECT s.job_id AS "jobId", NULL AS home, s.lease_id AS "leaseId", ${epochMs('s.acquired_at')} AS "acquiredAt",
                  ${epochMs('s.expires_at')} AS "expiresAt", s.worker_id AS "workerId"
           FROM jl_slots s WHERE s.stream = $1
           UNION ALL
           -- A guest's lease is its home's: the limit key knows when it took the slot, nothing more.
           SELECT g.job_id, g.home, g.lease_id, ${epochMs('g.since')}, NULL, NULL
           FROM jl_limit_jobs g WHERE g.stream = $1 AND g.status = 'holding') h), '[]') AS holders,
       EXISTS (SELECT FROM jl_quarantined q WHERE q.stream = $1) AS quarantined
FROM jl_keys k
WHERE k.stream = $1`;

interface Row {
  limit: number;
  paused: KeyPause | null;
  lineLength: number;
  inLine: number;
  aheadCount: number;
  ahead: string[];
  holders: { jobId: string; home: string | null; leaseId: string; acquiredAt: number; expiresAt: number | null; workerId: string | null }[];
  quarantined: boolean;
}

/**
 * The key `stream`'s line for an explanation of `jobId`, read from the read models (see above);
 * undefined for a key they do not hold, or hold back (quarantined). Its startedAt is for the caller
 * to find (the holders' JobStarted events).
 */
export const limitLine = async (db: Queryable, stream: string, jobId: string): Promise<Omit<LimitLine, 'startedAt'> | undefined> => {
  const row = (await db.query<Row>(LIMIT_LINE_SQL, [stream, jobId])).rows[0];
  if (row === undefined || row.quarantined) return undefined;
  const paused = toPause(row.paused);
  return {
    stream,
    limit: row.limit,
    holding: row.holders.length,
    paused: paused === null ? undefined : paused,
    place: row.inLine === 0 ? null : { n: row.aheadCount + 1, of: row.lineLength },
    ahead: row.ahead,
    holders: row.holders.map((h) => ({
      jobId: h.jobId,
      ...(h.home === null ? {} : { home: h.home }),
      lease: { leaseId: h.leaseId, acquiredAt: toMs(h.acquiredAt), expiresAt: toMs(h.expiresAt), workerId: h.workerId },
    })),
  };
};

// The sweeper's one read (src/adapters/worker/sweeper.ts). Reads jl_slots (through
// jl_jobs_expiry), jl_jobs (through jl_jobs_due), jl_limit_jobs and the view jl_key_stats;
// writes nothing.
// Candidates only: the decider decides (a lease renewed meanwhile decides nothing). $1 is now
// on the ledger's clock (epoch ms), the clock the decider decides on — never the server's now(),
// or a test's injected time and the decider's would disagree on what is due; $2 the most
// streams of each kind. One statement, not one per kind: a sweep is one read of the read models
// (one transaction a second beside the workers' commits, whatever kinds of work there are).
//   expired   streams with a started lease expired by $1 (jl_jobs_expiry; an admission nobody
//             started has no expiry)
//   due       streams with a scheduled job due by $1 (jl_jobs_due)
//   stranded  keys with a free slot and, in their line, jobs under further limits (a guest, or a
//             job of the key whose guests wait elsewhere): the FillSlots a process that died after
//             a release could not write. Jobs under one limit never wait with a free slot (the
//             release promotes them in its own append), so only jl_limit_jobs' waiters are looked at.
// Each kind in stream order from where the last sweep of that kind stopped ($3, $4, $5: the last
// stream it handled, '' from the start): with more candidates than $2, the next sweep goes on
// after them, so none waits behind the same first $2 for ever (a stranded line the sweep kept
// passing over; issue 21, item 4), and a candidate that cannot progress (quarantined) takes no
// turn from the others. The sweeper starts a kind over once it returned fewer than $2.
// The stranded kind counts the lines of the keys that have waiters only (waiting, MATERIALIZED,
// then each key's figures): joined to jl_key_stats as one relation, the planner counted every
// key's line, 47 ms a tick at 10,003 keys (bench:reads). A job's own stream (job:…) has no
// jl_keys row, so its waiting homes are left out before they are counted (a capped queue's 20,000).
// test/projections/schema.int.test.ts EXPLAINs this very text.
export const SWEEP_CANDIDATES_SQL = /* sql */ `
(SELECT DISTINCT 'expired' AS kind, stream FROM jl_slots WHERE expires_at <= to_timestamp($1::float8 / 1000) AND stream > $3 ORDER BY stream LIMIT $2)
UNION ALL
(SELECT DISTINCT 'due', stream FROM jl_jobs WHERE run_at <= to_timestamp($1::float8 / 1000) AND stream > $4 ORDER BY stream LIMIT $2)
UNION ALL
(WITH waiting AS MATERIALIZED (
   SELECT DISTINCT w.stream FROM (
     SELECT stream FROM jl_limit_jobs WHERE status = 'parked'
     UNION ALL
     SELECT home FROM jl_limit_jobs WHERE status = 'parked' AND NOT starts_with(home, 'job:')
   ) w
   WHERE w.stream > $5
 )
 SELECT 'stranded', k.stream FROM waiting w CROSS JOIN LATERAL (SELECT * FROM jl_key_stats s WHERE s.stream = w.stream) k
 WHERE k.paused_at IS NULL AND k.in_use < k.concurrency_limit AND k.parked > 0
 ORDER BY k.stream
 LIMIT $2)`;

/** How long the database has been up (ms): a sweeper that starts leading after a restart it did not see gives leases their grace from then. */
export const DATABASE_UPTIME_SQL = /* sql */ `SELECT (extract(epoch FROM now() - pg_postmaster_start_time()) * 1000)::float8 AS uptime_ms`;

/** The `kind` column of SWEEP_CANDIDATES_SQL: what the sweeper submits for the stream. */
export type SweepCandidate = 'expired' | 'due' | 'stranded';

import type { Queryable } from '../../../projections/transaction.js';
import { paramTime, unstartedBefore } from './holder-state.js';
import { workerLive } from './workers.js';

// What the reads of the dashboard's polls depend on, read cheaply enough to be asked on every poll
// before the read itself (src/adapters/http/etag.ts makes an ETag of the parts a route depends on):
// equal parts, equal answers but for the clock.
//
// The read models change only in a transaction that also appends to the ledger (inline
// projections) or moves a projection's checkpoint (async ones, a rebuild). The newest appended row
// alone would miss a transaction that commits after a younger one: global order is (transaction
// id, position), and a transaction with a smaller id may commit later. Any such transaction was
// running when the newest row was read, so it is in that snapshot's list of running transactions
// below the newest row's id (`pending`); once it ends the list differs. Together: nothing appended
// between two equal readings. A transaction that pg_stat_activity shows in another database
// cannot append here and is left out (else each long transaction of the server's other databases
// would move the tags as it ended); one it does not show (ended, prepared) stays in. The rest
// changes without an append and is read whole: the checkpoints, the quarantines, the workers' rows (small tables), and the two facts that change
// with the clock alone, counted (each only grows while nothing else changes): leases run out by
// now, and admissions waiting longer than the unstarted threshold.

export interface LedgerVersion {
  /** The newest row of the ledger, live or archived (archive keeps a row's transaction id and position): `transaction id/position`, null while empty. */
  readonly head: string | null;
  /** Transactions running in the reading's snapshot with an id below head's (any may still append rows ordered before it). */
  readonly pending: string;
  /** Digest of projection_checkpoints. */
  readonly projected: string;
  /** Digest of jl_quarantined. */
  readonly quarantined: string;
  /** Digest of each worker's id, queue, concurrency and liveness now: what holder states and consumers depend on. */
  readonly presence: string;
  /** Digest of every column of every worker with its liveness: a heartbeat changes it. */
  readonly beats: string;
  /** Leases run out by now (jl_jobs_expiry). */
  readonly expired: number;
  /** Admitted jobs nobody started, admitted longer ago than the threshold (jl_jobs_claim). */
  readonly unstarted: number;
}

const digest = (rows: string, order: string): string => `md5(coalesce(string_agg(${rows}, ';' ORDER BY ${order}), ''))`;

// $1: now (epoch ms, the ledger's clock), $2: the unstarted threshold (ms). One statement, one
// snapshot: head and pending must come from the same one. The newest rows by
// appends_global_order and appends_archive_global_order (backwards, one entry each); the
// snapshot's running transactions; projection_checkpoints, jl_quarantined and workers whole (a
// few rows each); jl_jobs_expiry up to now; jl_jobs_claim's entries (the admitted jobs nobody started).
// `pending` MUST be read where the ledger's transaction ids are made, the coordinator on Citus: its
// subquery reads no distributed table (a worker's snapshot lists the worker's own ids), so Citus
// evaluates it there (test/citus/reads.citus.test.ts, "pending").
export const LEDGER_VERSION_SQL = /* sql */ `
WITH newest AS MATERIALIZED (
  SELECT transaction_id, position FROM (
    (SELECT transaction_id, position FROM appends ORDER BY transaction_id DESC, position DESC LIMIT 1)
    UNION ALL
    (SELECT transaction_id, position FROM appends_archive ORDER BY transaction_id DESC, position DESC LIMIT 1)
  ) n ORDER BY transaction_id DESC, position DESC LIMIT 1
),
presence AS MATERIALIZED (
  SELECT w.*, ${workerLive('w')} AS live FROM workers w
)
SELECT
  (SELECT transaction_id::text || '/' || position FROM newest) AS head,
  (SELECT coalesce(string_agg(x::text, ',' ORDER BY x), '') FROM pg_snapshot_xip(pg_current_snapshot()) AS x
    WHERE x < (SELECT transaction_id FROM newest)
      AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datname IS DISTINCT FROM current_database() AND a.backend_xid::text::bigint = (x::text::bigint & 4294967295))) AS pending,
  (SELECT ${digest('c::text', 'c.projection')} FROM projection_checkpoints c) AS projected,
  (SELECT ${digest('q::text', 'q.stream, q.reader')} FROM jl_quarantined q) AS quarantined,
  (SELECT ${digest('ROW(p.id, p.queue, p.concurrency, p.live)::text', 'p.id')} FROM presence p) AS presence,
  (SELECT ${digest('p::text', 'p.id')} FROM presence p) AS beats,
  (SELECT count(*)::int FROM jl_jobs j WHERE j.expires_at <= ${paramTime(1)}) AS expired,
  (SELECT count(*)::int FROM jl_jobs j WHERE j.status = 'holding' AND j.acquired_at < ${unstartedBefore(paramTime(1), '$2::float8')}) AS unstarted`;

/** The parts of what the polled reads depend on, at `now` (the ledger's clock). */
export const readLedgerVersion = async (db: Queryable, now: number, unstartedAfterMs: number): Promise<LedgerVersion> =>
  (await db.query<LedgerVersion>(LEDGER_VERSION_SQL, [now, unstartedAfterMs])).rows[0]!;

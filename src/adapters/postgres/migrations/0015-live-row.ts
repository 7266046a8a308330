import type { Migration } from './migration.js';

// Issue 22, lever 1: one row per job, its live row. A job's slot (jl_slots), its place in a line
// (jl_parked) and its dispatch message (queue_messages) were rows of their own, each inserted,
// updated and deleted as the job passed: about nine row versions per job beside its jl_jobs row.
// Now jl_jobs carries them as columns, written by the same projection, and the three are what the
// job's row says while it holds a slot or waits:
//   - jl_slots and jl_parked are views over jl_jobs (their columns as before), so every reader keeps
//     its shape; the partial indexes below answer what their indexes answered;
//   - the dispatch queue is jl_jobs itself: an admitted job nobody started (status 'holding') is a
//     message, a worker claims it with FOR UPDATE SKIP LOCKED in the transaction that starts it
//     (src/adapters/queue/job-queue.ts), and its start, renewals and release are the updates the
//     projection makes anyway. A row lock lasts only that transaction, so nothing is hidden for a
//     time: the visibility timeout, the message ids and the archive go, with the queue tables.
// Every update now changes an indexed column (status is in the partial indexes' predicates), so
// none is HOT: three row versions for a job that is admitted, started and completed is the floor.
// Rows of every column here are folded from the events (src/projections/read-models.ts), so a
// rebuild writes them again and `replay --verify` compares them.
//
// Upgrading MUST stop every process of an older release first: such a process would write the
// old tables and read the old queue (README, "Upgrading").
/**
 * The views jl_slots and jl_parked over jl_jobs, their tables unqualified: a scratch copy of the
 * read models (a test's, in a schema first on the search path) gets them over its own jl_jobs.
 */
export const LIVE_ROW_VIEWS_SQL = /* sql */ `
CREATE VIEW jl_slots AS
SELECT job_id, stream, key, lease_id, how, acquired_at, expires_at,
       CASE WHEN status = 'running' THEN worker_id END AS worker_id,
       CASE WHEN status = 'running' THEN started_at END AS started_at,
       CASE WHEN status = 'running' THEN attempts END AS attempt,
       revoked_by, revoked_at, revoke_cancels
FROM jl_jobs WHERE status IN ('holding', 'running');
CREATE VIEW jl_parked AS
SELECT job_id, stream, key, priority, park_seq AS seq, parked_at
FROM jl_jobs WHERE status = 'parked';`;

export const liveRow: Migration = {
  version: 15,
  name: 'live-row',
  sql: /* sql */ `
ALTER TABLE jl_jobs
  ADD COLUMN how            text CHECK (how IN ('acquired', 'promoted')),
  ADD COLUMN acquired_at    timestamptz,
  ADD COLUMN expires_at     timestamptz,
  ADD COLUMN revoked_by     text,
  ADD COLUMN revoked_at     timestamptz,
  ADD COLUMN revoke_cancels boolean,
  ADD COLUMN parked_at      timestamptz,
  ADD COLUMN park_seq       bigint;
COMMENT ON COLUMN jl_jobs.how IS
  'While it holds a slot: how it got it, acquired at arrival (SlotAcquired) or promoted from parking (JobPromoted); null otherwise.';
COMMENT ON COLUMN jl_jobs.acquired_at IS
  'While it holds a slot: when it got it (the claim order of admitted jobs); null otherwise.';
COMMENT ON COLUMN jl_jobs.expires_at IS
  'While it runs: when its lease runs out unless renewed (JobStarted, LeaseRenewed); null otherwise: an admission nobody started holds its slot without expiry.';
COMMENT ON COLUMN jl_jobs.revoked_by IS
  'Who revoked its running lease (a release, or a cancel of the job): its handler is told to stop, and the slot passes on when it has or the lease lapses. Null while nobody has.';
COMMENT ON COLUMN jl_jobs.revoked_at IS
  'When its running lease was revoked; null while it is not.';
COMMENT ON COLUMN jl_jobs.revoke_cancels IS
  'true: the revocation cancels the job (it is not retried); false: a release (it is retried, as a reclaimed lease''s job is); null while not revoked.';
COMMENT ON COLUMN jl_jobs.parked_at IS
  'While parked: when it parked; null otherwise.';
COMMENT ON COLUMN jl_jobs.park_seq IS
  'While parked: second part of its place in the key''s line (after priority): its enqueue order (seq), or for a job under further limits the revision of its last JobParked; null otherwise.';
COMMENT ON TABLE jl_jobs IS
  'Read model: every job ever enqueued, finished ones included (the key state keeps only unfinished jobs), with its status, attempts, timings and last error; and, while it is unfinished, its live row: its slot, its place in a line, and (status holding) the dispatch message a worker claims. Projection read_models; rebuildable.';
COMMENT ON COLUMN jl_jobs.lease_id IS
  'The lease it holds its slot under; null when it holds none. With status holding it is an admitted job a worker may claim (the dispatch message).';
COMMENT ON COLUMN jl_jobs.worker_id IS
  'Worker of its last start (kept after the slot is released, for history); null if never started. The running worker while status is running.';
COMMENT ON COLUMN jl_jobs.updated_at IS
  'Time of the last event that changed this row, lease renewals and revocations apart (they change only the lease columns).';

UPDATE jl_jobs j
SET how = s.how, acquired_at = s.acquired_at, expires_at = s.expires_at,
    revoked_by = s.revoked_by, revoked_at = s.revoked_at, revoke_cancels = s.revoke_cancels
FROM jl_slots s WHERE s.job_id = j.job_id;
UPDATE jl_jobs j SET parked_at = p.parked_at, park_seq = p.seq FROM jl_parked p WHERE p.job_id = j.job_id;

DROP VIEW jl_key_stats;
DROP TABLE jl_slots;
DROP TABLE jl_parked;
DROP TABLE queue_messages;
DROP TABLE queue_archive;
DROP TABLE queue_send_counts;
DROP TABLE queues;

CREATE INDEX jl_jobs_claim ON jl_jobs (queue, acquired_at) WHERE status = 'holding';
COMMENT ON INDEX jl_jobs_claim IS
  'The dispatch read: the admitted jobs of a queue nobody started, oldest admission first (FOR UPDATE SKIP LOCKED); also each queue''s depth and oldest admission.';
CREATE INDEX jl_jobs_holders ON jl_jobs (stream) WHERE status IN ('holding', 'running');
COMMENT ON INDEX jl_jobs_holders IS
  'The holders of one key (jl_slots by stream): slots in use and the nearest lease expiry for jl_key_stats and the key view.';
CREATE INDEX jl_jobs_expiry ON jl_jobs (expires_at) INCLUDE (stream) WHERE expires_at IS NOT NULL;
COMMENT ON INDEX jl_jobs_expiry IS
  'The sweeper: which streams have a started lease expired by now (expires_at <= $now), without touching the table; expires_at is set only while a job runs.';
CREATE INDEX jl_jobs_parked ON jl_jobs (stream, priority, park_seq) WHERE status = 'parked';
COMMENT ON INDEX jl_jobs_parked IS
  'The line of one key (jl_parked by stream), in promotion order: the key view, counts for jl_key_stats.';

${LIVE_ROW_VIEWS_SQL}
COMMENT ON VIEW jl_slots IS
  'The slots held now, one per holder (admitted or running): the jobs whose jl_jobs row holds a lease. Its predicate is jl_jobs_holders''s, so a read by stream uses that index.';
COMMENT ON COLUMN jl_slots.job_id IS 'The holder (jl_jobs.job_id).';
COMMENT ON COLUMN jl_slots.stream IS 'The key''s stream (or job:<job_id>).';
COMMENT ON COLUMN jl_slots.key IS 'The key; null for a job without one.';
COMMENT ON COLUMN jl_slots.lease_id IS 'The lease the slot is held under.';
COMMENT ON COLUMN jl_slots.how IS 'acquired at arrival, or promoted from parking.';
COMMENT ON COLUMN jl_slots.acquired_at IS 'When the slot was taken.';
COMMENT ON COLUMN jl_slots.expires_at IS 'When a started lease runs out unless renewed; null for an admission nobody started.';
COMMENT ON COLUMN jl_slots.worker_id IS 'The worker that started it under this lease; null while unstarted.';
COMMENT ON COLUMN jl_slots.started_at IS 'When it was started under this lease; null while unstarted.';
COMMENT ON COLUMN jl_slots.attempt IS 'The attempt this start is; null while unstarted.';
COMMENT ON COLUMN jl_slots.revoked_by IS 'jl_jobs.revoked_by.';
COMMENT ON COLUMN jl_slots.revoked_at IS 'jl_jobs.revoked_at.';
COMMENT ON COLUMN jl_slots.revoke_cancels IS 'jl_jobs.revoke_cancels.';

COMMENT ON VIEW jl_parked IS
  'The parked jobs, waiting for a slot of their key (and of every further limit): the jobs whose jl_jobs row is parked. Promotion order is (priority, seq); its predicate is jl_jobs_parked''s.';
COMMENT ON COLUMN jl_parked.job_id IS 'The parked job.';
COMMENT ON COLUMN jl_parked.stream IS 'The key''s stream.';
COMMENT ON COLUMN jl_parked.key IS 'The key.';
COMMENT ON COLUMN jl_parked.priority IS 'Smaller is promoted first.';
COMMENT ON COLUMN jl_parked.seq IS 'jl_jobs.park_seq: second part of the promotion order.';
COMMENT ON COLUMN jl_parked.parked_at IS 'When it parked.';

CREATE VIEW jl_key_stats AS
SELECT k.key,
       k.stream,
       k.concurrency_limit,
       k.lease_ms,
       ((SELECT count(*) FROM jl_slots s WHERE s.stream = k.stream)
        + (SELECT count(*) FROM jl_limit_jobs g WHERE g.stream = k.stream AND g.status = 'holding'))::integer AS in_use,
       ((SELECT count(*) FROM jl_parked p WHERE p.stream = k.stream)
        + (SELECT count(*) FROM jl_limit_jobs g WHERE g.stream = k.stream AND g.status = 'parked'))::integer AS parked,
       (SELECT count(*) FROM jl_jobs j WHERE j.stream = k.stream AND j.run_at IS NOT NULL)::integer AS scheduled,
       least((SELECT min(p.parked_at) FROM jl_parked p WHERE p.stream = k.stream),
             (SELECT min(g.since) FROM jl_limit_jobs g WHERE g.stream = k.stream AND g.status = 'parked')) AS oldest_parked_at,
       least((SELECT min(s.expires_at) FROM jl_slots s WHERE s.stream = k.stream),
             (SELECT min(s.expires_at) FROM jl_limit_jobs g JOIN jl_slots s ON s.job_id = g.job_id
              WHERE g.stream = k.stream AND g.status = 'holding')) AS next_lease_expiry,
       k.updated_at,
       k.paused_at,
       k.paused_by,
       k.paused_reason,
       (SELECT count(*) FROM jl_limit_jobs g WHERE g.stream = k.stream AND g.status = 'holding')::integer AS guests_holding,
       (SELECT count(*) FROM jl_limit_jobs g WHERE g.stream = k.stream AND g.status = 'parked')::integer AS guests_parked
FROM jl_keys k;
COMMENT ON VIEW jl_key_stats IS
  'Per key: limit, slots in use, parked and scheduled jobs, oldest parked job, nearest lease expiry, pause; slots and waits of the key''s guests (jl_limit_jobs) count with its own jobs''. Counted from jl_jobs (through jl_slots, jl_parked) and jl_limit_jobs on each read (no counters to drift).';
COMMENT ON COLUMN jl_key_stats.key IS 'jl_keys.key.';
COMMENT ON COLUMN jl_key_stats.stream IS 'jl_keys.stream.';
COMMENT ON COLUMN jl_key_stats.concurrency_limit IS 'jl_keys.concurrency_limit.';
COMMENT ON COLUMN jl_key_stats.lease_ms IS 'jl_keys.lease_ms.';
COMMENT ON COLUMN jl_key_stats.in_use IS
  'Slots held now, by the key''s own jobs and its guests (may exceed the limit for a while after the limit was lowered: no one is preempted).';
COMMENT ON COLUMN jl_key_stats.parked IS
  'Jobs waiting for a slot: the key''s own and its guests.';
COMMENT ON COLUMN jl_key_stats.scheduled IS
  'Jobs of the key due later (or waiting for a retry), holding no slot.';
COMMENT ON COLUMN jl_key_stats.oldest_parked_at IS
  'When the longest-waiting parked job (own or guest) began to wait; null when none is parked.';
COMMENT ON COLUMN jl_key_stats.next_lease_expiry IS
  'The nearest lease expiry among the started holders, guests included (a guest''s lease is its home''s); null when no started slot is held.';
COMMENT ON COLUMN jl_key_stats.updated_at IS 'jl_keys.updated_at.';
COMMENT ON COLUMN jl_key_stats.paused_at IS
  'jl_keys.paused_at: when the key was paused; NULL while it runs.';
COMMENT ON COLUMN jl_key_stats.paused_by IS 'jl_keys.paused_by.';
COMMENT ON COLUMN jl_key_stats.paused_reason IS 'jl_keys.paused_reason.';
COMMENT ON COLUMN jl_key_stats.guests_holding IS
  'Of in_use, the slots held by guests (jobs of other streams under this key''s limit).';
COMMENT ON COLUMN jl_key_stats.guests_parked IS
  'Of parked, the guests waiting in this key''s line.';

-- A projection's UPDATE of rows that must exist (an admission, a release: the job's JobEnqueued
-- made its row) fails the batch when one is missing: a job without its row would never be claimed.
CREATE FUNCTION jl_expect_rows(rows_found bigint, rows_expected integer, what text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  IF rows_found <> rows_expected THEN
    RAISE EXCEPTION 'read model: % of % rows of % found', rows_found, rows_expected, what USING ERRCODE = 'JL002';
  END IF;
  RETURN rows_found;
END
$$;
COMMENT ON FUNCTION jl_expect_rows(bigint, integer, text) IS
  'Fails the transaction (SQLSTATE JL002) unless rows_found = rows_expected: the read-model projection''s check that every jl_jobs row it updates exists (a ledger whose job has no row is broken; silently skipping it would lose the job).';
`,
};

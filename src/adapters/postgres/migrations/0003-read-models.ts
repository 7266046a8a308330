import type { Migration } from './migration.js';

// Projections of the ledger (src/projections): their bookkeeping (`projection_streams`,
// `projection_checkpoints`), the read models (`jl_*`, rebuildable from the events at any time) and
// the dispatcher's own table (`dispatch_jobs`, never rebuilt: the dispatcher's effect is queue
// messages, and a replay must not send them again).
//
// Times are timestamptz made from the events' `at` (epoch ms) and time fields, never now(): a
// replay writes the same rows as the live projection did. Stream names are collated "C" like in
// `events`.
export const readModels: Migration = {
  version: 3,
  name: 'read_models',
  sql: /* sql */ `
CREATE TABLE projection_streams (
  projection text NOT NULL,
  stream     text COLLATE "C" NOT NULL,
  revision   bigint NOT NULL CHECK (revision >= -1),
  PRIMARY KEY (projection, stream)
);

COMMENT ON TABLE projection_streams IS
  'Per projection and stream, the revision of the last event applied. Written in the transaction that applies the events, so an event at or below it is skipped (applying a batch twice changes nothing) and an event above revision + 1 is refused as a gap. Its row lock serialises appliers of one stream; a rebuild locks the table to hold inline appliers off.';
COMMENT ON COLUMN projection_streams.projection IS
  'Projection name (src/projections: read_models, dispatcher).';
COMMENT ON COLUMN projection_streams.stream IS
  'Stream whose events the projection applied, as in events.stream.';
COMMENT ON COLUMN projection_streams.revision IS
  'Revision of the last event of the stream the projection applied.';
COMMENT ON INDEX projection_streams_pkey IS
  'Finds (and locks) the rows of the streams of a batch; one row per projection and stream.';

CREATE TABLE projection_checkpoints (
  projection text PRIMARY KEY,
  commit     numeric(20, 0) NOT NULL CHECK (commit >= 0),
  prepare    numeric(20, 0) NOT NULL CHECK (prepare >= 0),
  updated_at timestamptz NOT NULL DEFAULT statement_timestamp()
);

COMMENT ON TABLE projection_checkpoints IS
  'Global position up to which an async (subscription) runner has applied the ledger, written in the transaction that applies the batch. Inline projections keep none (they apply at append time; one shared row would serialise every append): they rely on projection_streams alone.';
COMMENT ON COLUMN projection_checkpoints.projection IS
  'Projection name, as in projection_streams.projection.';
COMMENT ON COLUMN projection_checkpoints.commit IS
  'First part of the position of the last event handled (events.transaction_id on PostgreSQL, the commit position on EventStoreDB: an unsigned 64-bit number, hence numeric). 0 before the first.';
COMMENT ON COLUMN projection_checkpoints.prepare IS
  'Second part of the position (events.global_position, or the prepare position). 0 before the first.';
COMMENT ON COLUMN projection_checkpoints.updated_at IS
  'When the checkpoint last moved (statement time): how long ago the runner made progress.';
COMMENT ON INDEX projection_checkpoints_pkey IS
  'One checkpoint per projection.';

CREATE TABLE jl_jobs (
  job_id        text PRIMARY KEY,
  stream        text COLLATE "C" NOT NULL,
  key           text,
  seq           bigint NOT NULL,
  name          text NOT NULL,
  queue         text NOT NULL,
  args          jsonb NOT NULL,
  priority      bigint NOT NULL,
  status        text NOT NULL CHECK (status IN ('pending', 'scheduled', 'parked', 'holding', 'running', 'completed', 'dead', 'cancelled', 'discarded')),
  attempts      integer NOT NULL CHECK (attempts >= 0),
  max_attempts  integer NOT NULL,
  lease_ms      integer NOT NULL,
  enqueued_at   timestamptz NOT NULL,
  run_at        timestamptz,
  started_at    timestamptz,
  finished_at   timestamptz,
  last_error    text,
  finish_reason text,
  worker_id     text,
  lease_id      text,
  updated_at    timestamptz NOT NULL
);

COMMENT ON TABLE jl_jobs IS
  'Read model: every job ever enqueued, finished ones included (the key state keeps only unfinished jobs), with its status, attempts, timings and last error. Projection read_models; rebuildable.';
COMMENT ON COLUMN jl_jobs.job_id IS
  'Job id, unique across all keys.';
COMMENT ON COLUMN jl_jobs.stream IS
  'Stream the job is recorded in: key:<key>, or job:<job_id> for a job without a key.';
COMMENT ON COLUMN jl_jobs.key IS
  'Concurrency key; null for a job without one.';
COMMENT ON COLUMN jl_jobs.seq IS
  'Enqueue order within the stream: the revision of its JobEnqueued event. Ties of priority are promoted in this order.';
COMMENT ON COLUMN jl_jobs.name IS
  'Handler name.';
COMMENT ON COLUMN jl_jobs.queue IS
  'Dispatch queue its admissions are sent to.';
COMMENT ON COLUMN jl_jobs.args IS
  'Arguments handed to the handler (JSON).';
COMMENT ON COLUMN jl_jobs.priority IS
  'Smaller is promoted first.';
COMMENT ON COLUMN jl_jobs.status IS
  'scheduled (due later, holds no slot), parked (waits for a slot), holding (admitted, not started under this lease), running (started under its current lease), completed, dead (no attempt left), cancelled, discarded (parked job dropped by an operator); pending only between the events of one append (enqueued or released, next place not yet recorded), visible only when an async batch ends inside an append.';
COMMENT ON COLUMN jl_jobs.attempts IS
  'Starts so far (a yielded start is handed back; a refused or parked admission costs none).';
COMMENT ON COLUMN jl_jobs.max_attempts IS
  'Starts allowed before the job is dead.';
COMMENT ON COLUMN jl_jobs.lease_ms IS
  'Lease of each admission and start, in ms.';
COMMENT ON COLUMN jl_jobs.enqueued_at IS
  'Time of its JobEnqueued.';
COMMENT ON COLUMN jl_jobs.run_at IS
  'When a scheduled job (or retry) is due; null in any other status.';
COMMENT ON COLUMN jl_jobs.started_at IS
  'Time of its last JobStarted; null if never started.';
COMMENT ON COLUMN jl_jobs.finished_at IS
  'When it was completed, dead, cancelled or discarded; null while unfinished.';
COMMENT ON COLUMN jl_jobs.last_error IS
  'Error of its last JobFailed; null if it never failed.';
COMMENT ON COLUMN jl_jobs.finish_reason IS
  'Why it finished other than by completing: JobDead''s reason, "cancelled by <who>", "discarded by <who>"; null otherwise.';
COMMENT ON COLUMN jl_jobs.worker_id IS
  'Worker of its last start (kept after the slot is released, for history); null if never started.';
COMMENT ON COLUMN jl_jobs.lease_id IS
  'Lease it holds now; null when it holds no slot.';
COMMENT ON COLUMN jl_jobs.updated_at IS
  'Time of the last event that changed this row (lease renewals change only jl_slots).';
COMMENT ON INDEX jl_jobs_pkey IS
  'Finds a job by id: every event of a job updates its row through it.';

CREATE INDEX jl_jobs_due ON jl_jobs (run_at) INCLUDE (stream) WHERE status = 'scheduled';
COMMENT ON INDEX jl_jobs_due IS
  'The sweeper: scheduled jobs due by now (run_at <= now()) and their streams, to AdmitDue, without touching the table.';

CREATE INDEX jl_jobs_stream ON jl_jobs (stream, status);
COMMENT ON INDEX jl_jobs_stream IS
  'The jobs of one key, by status: counts for jl_key_stats (scheduled) and dashboards.';

CREATE TABLE jl_slots (
  job_id      text PRIMARY KEY,
  stream      text COLLATE "C" NOT NULL,
  key         text,
  lease_id    text NOT NULL,
  how         text NOT NULL CHECK (how IN ('acquired', 'promoted')),
  acquired_at timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  worker_id   text,
  started_at  timestamptz,
  attempt     integer
);

COMMENT ON TABLE jl_slots IS
  'Read model: the slots held now, one row per holder and its lease (the key state''s holders). A row goes when SlotReleased frees the slot. Projection read_models; rebuildable.';
COMMENT ON COLUMN jl_slots.job_id IS
  'The holder; a job holds at most one slot.';
COMMENT ON COLUMN jl_slots.stream IS
  'Stream of the key (job:<job_id> for a job without a key).';
COMMENT ON COLUMN jl_slots.key IS
  'Concurrency key; null for a job without one.';
COMMENT ON COLUMN jl_slots.lease_id IS
  'The admission''s lease id; Start, Renew, Complete and Fail must carry it.';
COMMENT ON COLUMN jl_slots.how IS
  'acquired (admitted at once, by SlotAcquired) or promoted (from parked, by JobPromoted).';
COMMENT ON COLUMN jl_slots.acquired_at IS
  'When the slot was taken.';
COMMENT ON COLUMN jl_slots.expires_at IS
  'When the lease runs out unless renewed: set by the admission, JobStarted and LeaseRenewed.';
COMMENT ON COLUMN jl_slots.worker_id IS
  'Worker that started the job under this lease; null until started.';
COMMENT ON COLUMN jl_slots.started_at IS
  'When the job was started under this lease; null until started.';
COMMENT ON COLUMN jl_slots.attempt IS
  'Attempt number of the start under this lease; null until started.';
COMMENT ON INDEX jl_slots_pkey IS
  'Finds a holder by job id (start, renew, release).';

CREATE INDEX jl_slots_expiry ON jl_slots (expires_at) INCLUDE (stream);
COMMENT ON INDEX jl_slots_expiry IS
  'The sweeper: which streams have a lease expired by now (expires_at <= now()), without touching the table.';

CREATE INDEX jl_slots_stream ON jl_slots (stream, expires_at);
COMMENT ON INDEX jl_slots_stream IS
  'The holders of one key: slots in use and the nearest lease expiry for jl_key_stats.';

CREATE TABLE jl_parked (
  job_id    text PRIMARY KEY,
  stream    text COLLATE "C" NOT NULL,
  key       text,
  priority  bigint NOT NULL,
  seq       bigint NOT NULL,
  parked_at timestamptz NOT NULL
);

COMMENT ON TABLE jl_parked IS
  'Read model: jobs waiting for a slot of their key, promoted in (priority, seq) order. A row goes when the job is promoted, cancelled or discarded. Projection read_models; rebuildable.';
COMMENT ON COLUMN jl_parked.job_id IS
  'The parked job.';
COMMENT ON COLUMN jl_parked.stream IS
  'Stream of the key.';
COMMENT ON COLUMN jl_parked.key IS
  'Concurrency key (null only for a job without one, which is never parked in practice).';
COMMENT ON COLUMN jl_parked.priority IS
  'The job''s priority: smaller is promoted first.';
COMMENT ON COLUMN jl_parked.seq IS
  'The job''s enqueue order in its stream (jl_jobs.seq): second part of the promotion order.';
COMMENT ON COLUMN jl_parked.parked_at IS
  'When it was parked (last JobParked): the wait so far is now() - parked_at.';
COMMENT ON INDEX jl_parked_pkey IS
  'Finds a parked job by id (promotion, cancel, discard).';

CREATE INDEX jl_parked_order ON jl_parked (stream, priority, seq);
COMMENT ON INDEX jl_parked_order IS
  'The parked jobs of one key in promotion order, and their count for jl_key_stats.';

CREATE TABLE jl_keys (
  stream            text COLLATE "C" PRIMARY KEY,
  key               text NOT NULL,
  concurrency_limit integer NOT NULL,
  lease_ms          integer NOT NULL,
  updated_at        timestamptz NOT NULL
);

COMMENT ON TABLE jl_keys IS
  'Read model: every concurrency key with its limit and default lease (from its last KeyLimitSet). Jobs without a key are left out: each has a stream of its own with limit 1. Projection read_models; rebuildable.';
COMMENT ON COLUMN jl_keys.stream IS
  'Stream of the key: key:<key>.';
COMMENT ON COLUMN jl_keys.key IS
  'The concurrency key.';
COMMENT ON COLUMN jl_keys.concurrency_limit IS
  'At most this many jobs of the key hold a slot at once (the domain''s limit; named so because LIMIT is an SQL keyword).';
COMMENT ON COLUMN jl_keys.lease_ms IS
  'The key''s default lease, in ms (a job may carry its own: jl_jobs.lease_ms).';
COMMENT ON COLUMN jl_keys.updated_at IS
  'Time of the last KeyLimitSet.';
COMMENT ON INDEX jl_keys_pkey IS
  'One row per key stream.';

CREATE VIEW jl_key_stats AS
SELECT k.key,
       k.stream,
       k.concurrency_limit,
       k.lease_ms,
       (SELECT count(*) FROM jl_slots s WHERE s.stream = k.stream)::integer AS in_use,
       (SELECT count(*) FROM jl_parked p WHERE p.stream = k.stream)::integer AS parked,
       (SELECT count(*) FROM jl_jobs j WHERE j.stream = k.stream AND j.status = 'scheduled')::integer AS scheduled,
       (SELECT min(p.parked_at) FROM jl_parked p WHERE p.stream = k.stream) AS oldest_parked_at,
       (SELECT min(s.expires_at) FROM jl_slots s WHERE s.stream = k.stream) AS next_lease_expiry,
       k.updated_at
FROM jl_keys k;

COMMENT ON VIEW jl_key_stats IS
  'Per key: limit, slots in use, parked and scheduled jobs, oldest parked job, nearest lease expiry. Counted from jl_slots, jl_parked and jl_jobs on each read (no counters to drift).';
COMMENT ON COLUMN jl_key_stats.key IS
  'The concurrency key.';
COMMENT ON COLUMN jl_key_stats.stream IS
  'Stream of the key.';
COMMENT ON COLUMN jl_key_stats.concurrency_limit IS
  'The key''s limit.';
COMMENT ON COLUMN jl_key_stats.lease_ms IS
  'The key''s default lease, in ms.';
COMMENT ON COLUMN jl_key_stats.in_use IS
  'Slots held now (may exceed the limit for a while after the limit was lowered: no one is preempted).';
COMMENT ON COLUMN jl_key_stats.parked IS
  'Jobs waiting for a slot.';
COMMENT ON COLUMN jl_key_stats.scheduled IS
  'Jobs (and retries) due later, holding no slot.';
COMMENT ON COLUMN jl_key_stats.oldest_parked_at IS
  'When the longest-waiting parked job was parked; null when none is parked.';
COMMENT ON COLUMN jl_key_stats.next_lease_expiry IS
  'The nearest lease expiry among the holders; null when no slot is held.';
COMMENT ON COLUMN jl_key_stats.updated_at IS
  'Time of the key''s last KeyLimitSet.';

CREATE TABLE dispatch_jobs (
  job_id           text PRIMARY KEY,
  stream           text COLLATE "C" NOT NULL,
  key              text,
  queue            text NOT NULL,
  name             text NOT NULL,
  args             jsonb NOT NULL,
  attempts         integer NOT NULL,
  started_lease_id text
);

COMMENT ON TABLE dispatch_jobs IS
  'The dispatcher''s own table: what it needs to turn an admission into a queue message (name, args, queue, attempts) for each unfinished job. Written only by the dispatcher projection, in the transaction of its queue messages; never rebuilt (a replay would send every message again).';
COMMENT ON COLUMN dispatch_jobs.job_id IS
  'Job id; the row is deleted when the job finishes.';
COMMENT ON COLUMN dispatch_jobs.stream IS
  'Stream the job is recorded in.';
COMMENT ON COLUMN dispatch_jobs.key IS
  'Concurrency key, copied into each message; null for a job without one.';
COMMENT ON COLUMN dispatch_jobs.queue IS
  'Queue its messages go to.';
COMMENT ON COLUMN dispatch_jobs.name IS
  'Handler name, copied into each message.';
COMMENT ON COLUMN dispatch_jobs.args IS
  'Handler arguments, copied into each message.';
COMMENT ON COLUMN dispatch_jobs.attempts IS
  'Starts so far (JobStarted sets it, a JobYielded of a started lease hands one back): a message says attempt = attempts + 1.';
COMMENT ON COLUMN dispatch_jobs.started_lease_id IS
  'Lease of its last JobStarted: a JobYielded of that lease hands the attempt back, one of a lease never started does not.';
COMMENT ON INDEX dispatch_jobs_pkey IS
  'Finds the job of an admission.';
`,
};

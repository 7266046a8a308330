import type { Migration } from './migration.js';

// Stacked limits: a job may be under further limit keys besides its own (JobEnqueued.limits). On
// each of them it is a guest, recorded on the limit key's stream (LimitWaiting, LimitHeld,
// LimitReleased, LimitLeft); jl_jobs, jl_slots and jl_parked go on describing the job at its home
// only (one row per job), so the guests get a table of their own, and the key's figures
// (jl_key_stats) count them with the key's own jobs: a guest holds one of the key's slots, or
// waits in its line, like any of them. NULL in jl_jobs.limits for every job under no further
// limit, and for every job written before limit keys existed.
export const limitKeys: Migration = {
  version: 8,
  name: 'limit-keys',
  sql: /* sql */ `
CREATE TABLE jl_limit_jobs (
  stream   text COLLATE "C" NOT NULL,
  key      text NOT NULL,
  job_id   text NOT NULL,
  home     text COLLATE "C" NOT NULL,
  status   text NOT NULL CHECK (status IN ('parked', 'holding')),
  lease_id text,
  since    timestamptz NOT NULL,
  priority bigint NOT NULL,
  seq      bigint NOT NULL,
  PRIMARY KEY (stream, job_id),
  CHECK ((status = 'holding') = (lease_id IS NOT NULL))
);
COMMENT ON TABLE jl_limit_jobs IS
  'Read model: the guests of each limit key, jobs of other streams under its limit (JobEnqueued.limits) that hold one of its slots or wait in its line (the limit key''s LimitHeld/LimitWaiting); a row goes with LimitReleased or LimitLeft. The job itself (name, attempts, its lease and worker) is described at its home: jl_jobs, jl_slots, jl_parked. Projection read_models; rebuildable.';
COMMENT ON COLUMN jl_limit_jobs.stream IS
  'Stream of the limit key: key:<key>.';
COMMENT ON COLUMN jl_limit_jobs.key IS
  'The limit key.';
COMMENT ON COLUMN jl_limit_jobs.job_id IS
  'The guest (jl_jobs.job_id).';
COMMENT ON COLUMN jl_limit_jobs.home IS
  'The job''s own stream (key:<key>, or job:<job_id> for a job without a key), where its jl_jobs/jl_slots/jl_parked rows are.';
COMMENT ON COLUMN jl_limit_jobs.status IS
  'parked (waits in the key''s line: some limit of the job is full or paused) or holding (holds one of the key''s slots, under its home''s lease).';
COMMENT ON COLUMN jl_limit_jobs.lease_id IS
  'The home lease it holds the slot under (LimitHeld.leaseId, as in jl_slots.lease_id); NULL while parked.';
COMMENT ON COLUMN jl_limit_jobs.since IS
  'When it began to wait (parked) or took the slot (holding): the time of its last LimitWaiting or LimitHeld.';
COMMENT ON COLUMN jl_limit_jobs.priority IS
  'The job''s priority: smaller is promoted first.';
COMMENT ON COLUMN jl_limit_jobs.seq IS
  'Revision (in the limit key''s stream) of the event that put it in the key''s line: second part of the promotion order, comparable with the key''s own jobs'' jl_parked.seq.';
COMMENT ON INDEX jl_limit_jobs_pkey IS
  'The guests of one limit key (counts for jl_key_stats, the key view); a guest by stream and job id (each limit event updates its row).';

CREATE INDEX jl_limit_jobs_job ON jl_limit_jobs (job_id);
COMMENT ON INDEX jl_limit_jobs_job IS
  'A job''s rows across its limit keys.';

-- Such a job takes a new place at the back of its line each time it parks (as in its limit keys' lines).
COMMENT ON COLUMN jl_parked.seq IS
  'Second part of the promotion order: the job''s enqueue order in its stream (jl_jobs.seq); for a job under further limits (jl_jobs.limits), the revision of its last JobParked.';

ALTER TABLE jl_jobs ADD COLUMN limits text[];
COMMENT ON COLUMN jl_jobs.limits IS
  'The further limit keys the job is under besides its own key (JobEnqueued.limits): it holds a slot in each and in its own at once, or waits in all their lines (jl_limit_jobs). NULL for a job under no further limit.';

-- Guests take slots and wait like the key's own jobs: its figures count both (new columns go at the end).
CREATE OR REPLACE VIEW jl_key_stats AS
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
  'Per key: limit, slots in use, parked and scheduled jobs, oldest parked job, nearest lease expiry, pause; slots and waits of the key''s guests (jl_limit_jobs) count with its own jobs''. Counted from jl_slots, jl_parked, jl_limit_jobs and jl_jobs on each read (no counters to drift).';
COMMENT ON COLUMN jl_key_stats.in_use IS
  'Slots held now, by the key''s own jobs and its guests (may exceed the limit for a while after the limit was lowered: no one is preempted).';
COMMENT ON COLUMN jl_key_stats.parked IS
  'Jobs waiting for a slot: the key''s own and its guests.';
COMMENT ON COLUMN jl_key_stats.oldest_parked_at IS
  'When the longest-waiting parked job (own or guest) began to wait; null when none is parked.';
COMMENT ON COLUMN jl_key_stats.next_lease_expiry IS
  'The nearest lease expiry among the started holders, guests included (a guest''s lease is its home''s, jl_slots); null when no started slot is held.';
COMMENT ON COLUMN jl_key_stats.guests_holding IS
  'Of in_use, the slots held by guests (jobs of other streams under this key''s limit).';
COMMENT ON COLUMN jl_key_stats.guests_parked IS
  'Of parked, the guests waiting in this key''s line.';
`,
};

import type { Migration } from './migration.js';

// Worker presence (src/adapters/worker/presence.ts): each worker writes a row when it starts and
// refreshes it on a heartbeat, so an operator sees who is doing the work, and a holder whose
// worker went silent (kill -9, a lost host) is told apart from one being run. Operational data,
// not the ledger: nothing here is an event, nothing is rebuilt by a replay, and losing the table
// loses only who was seen lately. A worker is live while seen within WORKER_LIVE_BEATS of its own
// heartbeat period (heartbeat_ms), else gone; a kill -9 needs nothing written to become gone.
//
// No index on last_seen, on purpose: every heartbeat updates it, and an index on it would make
// each beat a non-HOT update (a new index entry per beat per worker). The table holds one row per
// worker started within the last day (older rows are pruned by the heartbeats), a few hundred
// rows at most, and every read scans it whole.
export const workers: Migration = {
  version: 9,
  name: 'workers',
  sql: /* sql */ `
CREATE TABLE workers (
  id           text PRIMARY KEY,
  host         text NOT NULL,
  pid          integer NOT NULL,
  queue        text COLLATE "C" NOT NULL,
  concurrency  integer NOT NULL CHECK (concurrency > 0),
  heartbeat_ms integer NOT NULL CHECK (heartbeat_ms > 0),
  started_at   timestamptz NOT NULL,
  last_seen    timestamptz NOT NULL,
  running      integer NOT NULL CHECK (running >= 0),
  stopped_at   timestamptz
) WITH (fillfactor = 70);
COMMENT ON TABLE workers IS
  'Worker presence: one row per worker (a Worker of a process, reading one queue), written at its start and refreshed on its heartbeat. Live while last_seen is within 3 heartbeats (heartbeat_ms) of now and stopped_at is null; gone otherwise. Not the ledger: operational data, not rebuilt by replay. Rows of workers gone for a day are pruned by the heartbeats of the others. Pages keep room (fillfactor 70) so a heartbeat is a HOT update.';
COMMENT ON COLUMN workers.id IS
  'The worker id, as recorded in JobStarted.workerId and jl_slots.worker_id (host:pid:random unless the worker was given one).';
COMMENT ON COLUMN workers.host IS
  'Host name of the worker''s machine (os.hostname()).';
COMMENT ON COLUMN workers.pid IS
  'Process id of the worker on its host.';
COMMENT ON COLUMN workers.queue IS
  'The dispatch queue it reads: it is a consumer of that queue while live.';
COMMENT ON COLUMN workers.concurrency IS
  'Handlers it runs at once at most.';
COMMENT ON COLUMN workers.heartbeat_ms IS
  'How often it refreshes last_seen (ms): readers call it gone once 3 of these pass without a beat, so each worker is judged by its own period.';
COMMENT ON COLUMN workers.started_at IS
  'When it started (the database''s clock), the time of its first row.';
COMMENT ON COLUMN workers.last_seen IS
  'Its last heartbeat (the database''s clock, like every time here, so workers on hosts with skewed clocks compare fairly).';
COMMENT ON COLUMN workers.running IS
  'Jobs it was running at its last heartbeat.';
COMMENT ON COLUMN workers.stopped_at IS
  'When it stopped gracefully (its running jobs finished or were yielded); null while running, and for a worker that died without stopping.';
COMMENT ON INDEX workers_pkey IS
  'A worker''s own row, by id: its start and each heartbeat; joins from jl_slots.worker_id to tell whether a holder''s worker is live.';
`,
};

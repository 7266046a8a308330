import type { Migration } from './migration.js';

// Issue 23: a key's state at a past moment from a state kept near it. `snapshots` holds each
// stream's newest state only, so `state --at` and the states an explanation of a past moment
// folded read the stream from its first event: 100,000 events for a busy key (bench:reads,
// ~0.6 s). The writer now also keeps some of its snapshots here (the flush's SAVE_KEPT_SNAPSHOTS_SQL:
// at every multiple of snapshotsKeptEvery revisions, spaced by at least the state's own jobs so a
// large state costs no more room than the events between two of them), and a reader of a past
// moment folds from the newest kept state that the moment is past (keyStateAt).
//
// States are stored as JSON text, not jsonb: a state is written whole and read whole, never
// queried inside, and jsonb made PostgreSQL parse it on every save and print it on every load. The
// state of a key with 20,000 waiting jobs is 4.7 MB of JSON: printing it took ~130 ms, parsing it
// ~190 ms, reading it as text ~9 ms (bench:reads' capped queue).
export const keptSnapshots: Migration = {
  version: 20,
  name: 'kept-snapshots',
  sql: /* sql */ `
CREATE TABLE snapshots_kept (
  stream         text COLLATE "C" NOT NULL,
  schema_version integer NOT NULL,
  revision       bigint NOT NULL CHECK (revision >= 0),
  decided_until  bigint NOT NULL,
  last_at        bigint NOT NULL,
  state          text NOT NULL,
  created        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream, schema_version, revision)
);

COMMENT ON TABLE snapshots_kept IS
  'Past states of key streams, kept by the writer at every multiple of snapshotsKeptEvery revisions (spaced by at least the state''s jobs): where a reader of a past moment starts folding (keyStateAt), instead of the stream''s first event. Derived data: dropping a row only makes such a read fold more.';
COMMENT ON COLUMN snapshots_kept.stream IS
  'Stream whose events were folded.';
COMMENT ON COLUMN snapshots_kept.schema_version IS
  'Version of the state''s shape (KEY_STATE_SCHEMA_VERSION); rows of another version are not read.';
COMMENT ON COLUMN snapshots_kept.revision IS
  'Revision of the last event folded into state.';
COMMENT ON COLUMN snapshots_kept.decided_until IS
  'The latest decision time (data.at, epoch ms) of any event up to revision: a fold up to a moment passes this state only if the moment is at or after it, since folding stops at the first event decided later. Not the last event''s time: writers'' clocks may disagree, and an earlier event may have been decided later.';
COMMENT ON COLUMN snapshots_kept.last_at IS
  'Decision time (epoch ms) of the event at revision: what a fold that stops right after it reports.';
COMMENT ON COLUMN snapshots_kept.state IS
  'The folded state, a JSON object as text, as in snapshots.state.';
COMMENT ON COLUMN snapshots_kept.created IS
  'When it was kept.';
COMMENT ON INDEX snapshots_kept_pkey IS
  'A stream''s kept states in revision order: the newest at or before a revision, the newest a moment is past (decided_until grows with revision), and the previous one when a new one is kept.';

ALTER TABLE snapshots ALTER COLUMN state TYPE text USING state::text;
COMMENT ON COLUMN snapshots.state IS
  'The folded state, a JSON object as text (written and read whole: never parsed by PostgreSQL). One that does not parse is ignored, as one that does not check out, and the stream folded.';
`,
};

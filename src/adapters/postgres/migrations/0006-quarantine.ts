import type { Migration } from './migration.js';

// Streams a reader could not read (issue 10): an event that does not decode — a type the code
// does not know, a payload missing a field, written by hand or by a newer release — stops that
// stream for that reader only, and the reader records it here, so the dashboard, /metrics and
// `jobledger keys` show the key as quarantined. Nothing is skipped or rewritten: the reader goes
// on without the stream until it decodes again (an operator fixed the event, or a release learnt
// its type), and then the row goes.
export const quarantine: Migration = {
  version: 6,
  name: 'quarantine',
  sql: /* sql */ `
CREATE TABLE jl_quarantined (
  stream     text NOT NULL,
  reader     text NOT NULL,
  revision   bigint NOT NULL,
  position   bigint NOT NULL,
  commit_id  xid8 NOT NULL,
  error      text NOT NULL,
  first_seen timestamptz NOT NULL DEFAULT statement_timestamp(),
  last_seen  timestamptz NOT NULL DEFAULT statement_timestamp(),
  PRIMARY KEY (stream, reader)
);
COMMENT ON TABLE jl_quarantined IS
  'Streams a reader stopped at: one row per stream and reader while the stream has an event that reader cannot decode. Written and deleted by the readers only (src/adapters/postgres/queries/quarantine.ts).';
COMMENT ON COLUMN jl_quarantined.stream IS
  'The stream (key:<key>, or job:<jobId> for a job without a key) with the undecodable event.';
COMMENT ON COLUMN jl_quarantined.reader IS
  'Who met it: "writer" (the key writer: commands on the key are refused, its messages wait) or "projection:<name>" (an async runner holds the stream back from this event on, its read model of the key stays where it was).';
COMMENT ON COLUMN jl_quarantined.revision IS
  'The undecodable event''s stream revision (events.stream_revision).';
COMMENT ON COLUMN jl_quarantined.position IS
  'The undecodable event''s events.global_position; with commit_id, where it sits in the global order.';
COMMENT ON COLUMN jl_quarantined.commit_id IS
  'The undecodable event''s events.transaction_id: an async runner applies the stream again from (commit_id, position) once it decodes.';
COMMENT ON COLUMN jl_quarantined.error IS
  'Why it does not decode (EventDecodeError''s message): the first problems the decoder found.';
COMMENT ON COLUMN jl_quarantined.first_seen IS
  'When a reader first met the event (the quarantine began).';
COMMENT ON COLUMN jl_quarantined.last_seen IS
  'When a reader last met it: a reader that keeps trying moves it on, so an old value means nothing has asked for the key since.';
COMMENT ON INDEX jl_quarantined_pkey IS
  'One row per stream and reader: a reader meeting the event again updates its row; a key''s rows for the keys list and key view.';
`,
};

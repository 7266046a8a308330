import type { Migration } from './migration.js';

// Issue 21, item 4 (DESIGN.md invariant 9): a decision rests only on state that was current when
// it committed. The expected revision of WRITE_SQL checks the streams a flush appends to; this
// checks, in the same transaction and before its COMMIT, the streams its decisions only READ: a
// limit key whose room decided a rejection, a queue's cap that turned out to be absent. Each must
// still be at the revision the decision saw (-1: no stream), else the whole transaction fails with
// SQLSTATE JL001 (the key writer's StaleStateError: it decides again on what the streams hold).
// A function, not a query the client looks at: the flush's statements go out pipelined with its
// COMMIT, so only an error raised inside the transaction can stop it.
export const readChecks: Migration = {
  version: 13,
  name: 'read-checks',
  sql: /* sql */ `
CREATE FUNCTION jl_check_read(checked_streams text[], expected bigint[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  moved text;
BEGIN
  SELECT string_agg(c.stream, ', ' ORDER BY c.stream) INTO moved
  FROM unnest(checked_streams, expected) AS c (stream, revision)
  LEFT JOIN streams s ON s.stream = c.stream
  WHERE coalesce(s.revision, -1) <> c.revision;
  IF moved IS NOT NULL THEN
    RAISE EXCEPTION 'streams read by the decision moved before it committed: %', moved USING ERRCODE = 'JL001', DETAIL = moved;
  END IF;
END
$$;
COMMENT ON FUNCTION jl_check_read(text[], bigint[]) IS
  'Fails the transaction (SQLSTATE JL001, DETAIL: the streams) unless each stream is at the revision given (-1: absent): the key writer''s check, before COMMIT, of the streams its decisions read without appending to them (invariant 9).';
`,
};

import type { Migration } from './migration.js';

// Issue 24: the read check of a distributed ledger. jl_check_read (migrations 13 and 16) reads
// `streams` and `appends` for a set of streams in one statement run from the coordinator, through
// a correlated subquery, which Citus does not plan. On a distributed ledger the writer checks each
// shard's streams in a statement of their own (stream-sql.ts READ_CHECK_ON_SHARD_SQL), which names
// the streams that moved; this raises jl_check_read's error for them, so a writer tells the two
// apart by nothing.
export const shardReadCheck: Migration = {
  version: 21,
  name: 'shard-read-check',
  sql: /* sql */ `
CREATE FUNCTION jl_reads_moved(moved text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF moved IS NOT NULL THEN
    RAISE EXCEPTION 'streams read by the decision moved before it committed: %', moved USING ERRCODE = 'JL001', DETAIL = moved;
  END IF;
END
$$;
COMMENT ON FUNCTION jl_reads_moved(text) IS
  'Raises jl_check_read''s error (JL001) naming the streams a decision read that moved before it committed; nothing when none did. Called by a distributed ledger''s read check of one shard.';
`,
};

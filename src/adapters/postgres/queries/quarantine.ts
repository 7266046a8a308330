import { epochMs, toMs } from './sql.js';

/** A key shown as quarantined: an event of its stream does not decode (jl_quarantined, migration 0006). */
export interface KeyQuarantine {
  /** The first undecodable event any reader stopped at: its stream revision… */
  readonly revision: number;
  /** …and global position (`transaction id/global_position`, as EventDecodeError names it). */
  readonly position: string;
  /** Why it does not decode. */
  readonly error: string;
  /** Who stopped at it: "writer" (commands refused, messages waiting), "projection:<name>" (read model held back). */
  readonly readers: readonly string[];
  readonly firstSeen: number;
  readonly lastSeen: number;
}

/** The quarantine of the jl_quarantined rows `q` of one stream, as one JSON value. */
const QUARANTINE_OBJECT = /* sql */ `json_build_object(
           'revision', min(q.revision),
           'position', (array_agg(q.commit_id::text || '/' || q.position ORDER BY q.revision, q.reader))[1],
           'error', (array_agg(q.error ORDER BY q.revision, q.reader))[1],
           'readers', array_agg(q.reader ORDER BY q.reader),
           'firstSeen', ${epochMs('min(q.first_seen)')},
           'lastSeen', ${epochMs('max(q.last_seen)')})`;

/**
 * The quarantine of the stream `streamExpr` names, as one JSON value (null: none), for a query's
 * select list: one lookup of jl_quarantined_pkey (its leading column).
 */
export const quarantineJson = (streamExpr: string): string => /* sql */ `(
  SELECT ${QUARANTINE_OBJECT}
  FROM jl_quarantined q WHERE q.stream = ${streamExpr}
  HAVING count(*) > 0)`;

/**
 * Every quarantined stream once, whatever the readers stopped at it (`stream`, `quarantine`: as
 * quarantineJson), for a join by stream: a few rows. Where a correlated subquery cannot go (Citus
 * refuses one over a CTE's rows: test/citus/reads.citus.test.ts).
 */
export const QUARANTINES = /* sql */ `SELECT q.stream, ${QUARANTINE_OBJECT} AS quarantine FROM jl_quarantined q GROUP BY q.stream`;

type Raw = Omit<KeyQuarantine, 'revision'> & { readonly revision: number | string };

export const toQuarantine = (raw: Raw | null): KeyQuarantine | null =>
  raw === null ? null : { ...raw, revision: Number(raw.revision), firstSeen: toMs(raw.firstSeen), lastSeen: toMs(raw.lastSeen) };

import { START, type GlobalPosition } from '../domain/ports/event-store.js';
import type { Queryable } from './transaction.js';

// Where each async projection stands (projection_checkpoints): the position it has applied
// through, and the snapshot of a rebuild that applied events past it. Also the advisory lock that
// makes one runner (or a rebuild) the projection's only applier, so one writer moves a checkpoint.

/** The snapshot a rebuild read in (pg_snapshot): the events it saw, also those past its checkpoint. */
export interface Snapshot {
  readonly xmin: bigint;
  readonly xmax: bigint;
  readonly running: ReadonlySet<bigint>;
}

/** pg_snapshot's text form, xmin:xmax:xip,xip,... */
const parseSnapshot = (text: string): Snapshot => {
  const [xmin, xmax, xip] = text.split(':');
  return { xmin: BigInt(xmin!), xmax: BigInt(xmax!), running: new Set((xip ?? '').split(',').filter(Boolean).map(BigInt)) };
};

/** pg_visible_in_snapshot, for a committed transaction. */
export const visibleIn = (s: Snapshot, txid: bigint): boolean => txid < s.xmin || (txid < s.xmax && !s.running.has(txid));

/** A checkpoint, and the snapshot of a rebuild that applied events past it (null: none). */
export const loadCheckpointRow = async (db: Queryable, projection: string): Promise<{ position: GlobalPosition; snapshot: Snapshot | null }> => {
  const { rows } = await db.query<{ commit: string; prepare: string; snapshot: string | null }>(
    'SELECT commit::text AS commit, prepare::text AS prepare, applied_snapshot::text AS snapshot FROM projection_checkpoints WHERE projection = $1',
    [projection],
  );
  const row = rows[0];
  if (row === undefined) return { position: START, snapshot: null };
  return { position: { commit: BigInt(row.commit), prepare: BigInt(row.prepare) }, snapshot: row.snapshot === null ? null : parseSnapshot(row.snapshot) };
};

/** The projection's checkpoint; START when it has none. */
export async function loadCheckpoint(db: Queryable, projection: string): Promise<GlobalPosition> {
  return (await loadCheckpointRow(db, projection)).position;
}

/**
 * Moves the checkpoint forward to `to` (never back, unless forced); true if it moved.
 * `appliedSnapshot`: a rebuild's snapshot (pg_snapshot text), whose events past `to` it applied too.
 */
export async function saveCheckpoint(
  db: Queryable,
  projection: string,
  to: GlobalPosition,
  options: { readonly force?: boolean; readonly appliedSnapshot?: string } = {},
): Promise<boolean> {
  const result = await db.query(
    // updated_at from the VALUES, not statement_timestamp() in DO UPDATE: on a distributed ledger
    // (Citus: projection_checkpoints is a reference table) DO UPDATE takes immutable functions only.
    `INSERT INTO projection_checkpoints AS c (projection, commit, prepare, applied_snapshot, updated_at) VALUES ($1, $2::numeric, $3::numeric, $5::pg_snapshot, statement_timestamp())
     ON CONFLICT (projection) DO UPDATE SET commit = excluded.commit, prepare = excluded.prepare, applied_snapshot = excluded.applied_snapshot, updated_at = excluded.updated_at
     WHERE $4 OR (c.commit, c.prepare) < (excluded.commit, excluded.prepare)`,
    [projection, to.commit.toString(), to.prepare.toString(), options.force === true, options.appliedSnapshot ?? null],
  );
  return (result.rowCount ?? 0) > 0;
}

/**
 * The advisory lock key (SQL; the projection's name is parameter `param`) that makes one async
 * runner (a session lock) or a rebuild (a transaction lock) the projection's only applier.
 */
export const projectionLockSql = (param: number): string => `hashtextextended('jobledger:projection:' || $${param}, 0)`;

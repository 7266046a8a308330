import type pg from 'pg';

/** How the database's read models and dispatch are applied: inline in each flush, or async by runners. */
export type ProjectionMode = 'inline' | 'async';

/** A ledger asked for the other mode than the database's: both at once would apply every event twice. */
export class ProjectionModeError extends Error {
  override readonly name = 'ProjectionModeError';
  constructor(
    readonly recorded: ProjectionMode,
    readonly wanted: ProjectionMode,
  ) {
    super(
      `this database's projections are applied ${recorded}, and a ledger opened with ${wanted} projections would apply every event twice: ` +
        `open it with inlineProjections: ${recorded === 'inline'} (or leave the option out to follow the database)`,
    );
  }
}

// The first ledger to open the database records its mode; every later one reads it. One statement,
// so two first openers cannot record different modes.
const MODE_SQL = `
WITH recorded AS (
  INSERT INTO ledger_settings (name, value) VALUES ('projections', $1) ON CONFLICT (name) DO NOTHING RETURNING value
)
SELECT value FROM recorded UNION ALL SELECT value FROM ledger_settings WHERE name = 'projections'`;

/** The database's projection mode, recording `wanted` (or inline) if none is; ProjectionModeError when `wanted` is the other one. */
// Read first: the mode is recorded once, and a write is dearer than a read (on a distributed
// ledger ledger_settings is a reference table: a write goes to every node, ~85 ms on three).
const RECORDED_SQL = `SELECT value FROM ledger_settings WHERE name = 'projections'`;

export const projectionMode = async (db: Pick<pg.ClientBase, 'query'>, wanted: ProjectionMode | undefined): Promise<ProjectionMode> => {
  let { rows } = await db.query<{ value: ProjectionMode }>(RECORDED_SQL);
  if (rows.length === 0) ({ rows } = await db.query<{ value: ProjectionMode }>(MODE_SQL, [wanted ?? 'inline']));
  // A first opener racing us: our INSERT waited for it and found its row, which the statement's
  // snapshot (taken before) cannot see. A new statement does.
  if (rows.length === 0) ({ rows } = await db.query<{ value: ProjectionMode }>(MODE_SQL, [wanted ?? 'inline']));
  const recorded = rows[0]!.value;
  if (wanted !== undefined && wanted !== recorded) throw new ProjectionModeError(recorded, wanted);
  return recorded;
};

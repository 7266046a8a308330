import type pg from 'pg';
import type { JsonObject, KeptSnapshot, Snapshot, SnapshotStore } from '../../domain/ports/event-store.js';

// $1 stream, $2 schema version, $3 revision (NULL: any), $4 epoch ms (NULL: any): the newest kept
// state a fold up to them passes (migration 20's snapshots_kept, by its primary key, backwards;
// decided_until grows with revision, so the first that qualifies is the newest).
export const KEPT_AT_SQL = `
SELECT k.revision::text AS revision, k.decided_until::text AS decided_until, k.last_at::text AS last_at, k.state FROM snapshots_kept k
WHERE k.stream = $1 AND k.schema_version = $2 AND ($3::bigint IS NULL OR k.revision <= $3::bigint) AND ($4::bigint IS NULL OR k.decided_until <= $4::bigint)
ORDER BY k.revision DESC
LIMIT 1`;

/**
 * A stored state (JSON text, migration 20) as the object it holds. One that does not parse reads as
 * an empty object, which no state is: the reader's check (snapshotState) refuses it and the stream
 * is folded instead, as for any snapshot that does not check out.
 */
export const parseSnapshotState = (text: string): JsonObject => {
  try {
    const parsed: unknown = JSON.parse(text);
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as JsonObject) : {};
  } catch {
    return {};
  }
};

/** Snapshots in the `snapshots` table (migration 1) and past states in `snapshots_kept` (migration 20), on a pool it does not own. */
export class PostgresSnapshotStore implements SnapshotStore {
  constructor(private readonly pool: pg.Pool) {}

  /** The snapshot with the highest revision, whatever its schema version: the caller checks that. */
  async load(stream: string): Promise<Snapshot | undefined> {
    const { rows } = await this.pool.query<{ revision: string; schema_version: number; state: string }>(
      `SELECT revision, schema_version, state FROM snapshots
       WHERE stream = $1
       ORDER BY revision DESC, schema_version DESC
       LIMIT 1`,
      [stream],
    );
    const row = rows[0];
    return row && { stream, revision: Number(row.revision), schemaVersion: row.schema_version, state: parseSnapshotState(row.state) };
  }

  async keptAt(stream: string, schemaVersion: number, until: { readonly revision?: number; readonly at?: number }): Promise<KeptSnapshot | undefined> {
    const { rows } = await this.pool.query<{ revision: string; decided_until: string; last_at: string; state: string }>(KEPT_AT_SQL, [stream, schemaVersion, until.revision ?? null, until.at ?? null]);
    const row = rows[0];
    return row && { stream, schemaVersion, revision: Number(row.revision), decidedUntil: Number(row.decided_until), lastAt: Number(row.last_at), state: parseSnapshotState(row.state) };
  }

  /** Keeps one snapshot per (stream, schema version); a late save of an older revision changes nothing. */
  async save(snapshot: Snapshot): Promise<void> {
    await this.pool.query(
      `INSERT INTO snapshots (stream, schema_version, revision, state) VALUES ($1, $2, $3, $4)
       ON CONFLICT (stream, schema_version) DO UPDATE
         SET revision = excluded.revision, state = excluded.state, created = now()
         WHERE snapshots.revision < excluded.revision`,
      [snapshot.stream, snapshot.schemaVersion, snapshot.revision, JSON.stringify(snapshot.state)],
    );
  }
}

import type pg from 'pg';
import type { JsonObject, Snapshot, SnapshotStore } from '../../domain/ports/event-store.js';

/** Snapshots in the `snapshots` table (migration 1), on a pool it does not own. */
export class PostgresSnapshotStore implements SnapshotStore {
  constructor(private readonly pool: pg.Pool) {}

  /** The snapshot with the highest revision, whatever its schema version: the caller checks that. */
  async load(stream: string): Promise<Snapshot | undefined> {
    const { rows } = await this.pool.query<{ revision: string; schema_version: number; state: JsonObject }>(
      `SELECT revision, schema_version, state FROM snapshots
       WHERE stream = $1
       ORDER BY revision DESC, schema_version DESC
       LIMIT 1`,
      [stream],
    );
    const row = rows[0];
    return row && { stream, revision: Number(row.revision), schemaVersion: row.schema_version, state: row.state };
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

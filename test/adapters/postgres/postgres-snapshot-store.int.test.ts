import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KEPT_AT_SQL, PostgresSnapshotStore } from '../../../src/adapters/postgres/postgres-snapshot-store.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/database.js';

describe('PostgresSnapshotStore', () => {
  let db: MigratedDatabase;
  let snapshots: PostgresSnapshotStore;

  beforeAll(async () => {
    db = await createMigratedDatabase(2);
    snapshots = new PostgresSnapshotStore(db.pool);
  });
  afterAll(() => db.drop());

  it('has nothing for a stream never snapshotted', async () => {
    expect(await snapshots.load('never')).toBeUndefined();
  });

  it('loads what was saved, state intact', async () => {
    const snapshot = { stream: 'key:a', revision: 41, schemaVersion: 3, state: { holders: ['j1'], limit: 2, nested: { x: null } } };
    await snapshots.save(snapshot);
    expect(await snapshots.load('key:a')).toEqual(snapshot);
    expect(await snapshots.load('key:a2')).toBeUndefined();
  });

  it('keeps the newest snapshot per schema version and never goes back to an older revision', async () => {
    await snapshots.save({ stream: 'key:b', revision: 10, schemaVersion: 1, state: { v: 10 } });
    await snapshots.save({ stream: 'key:b', revision: 20, schemaVersion: 1, state: { v: 20 } });
    await snapshots.save({ stream: 'key:b', revision: 15, schemaVersion: 1, state: { v: 15 } });
    expect(await snapshots.load('key:b')).toEqual({ stream: 'key:b', revision: 20, schemaVersion: 1, state: { v: 20 } });
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM snapshots WHERE stream = $1', ['key:b']);
    expect(rows[0].n).toBe(1);
  });

  it('loads the highest revision whatever its schema version', async () => {
    await snapshots.save({ stream: 'key:c', revision: 30, schemaVersion: 1, state: { old: true } });
    await snapshots.save({ stream: 'key:c', revision: 12, schemaVersion: 2, state: { fresh: true } });
    expect(await snapshots.load('key:c')).toMatchObject({ revision: 30, schemaVersion: 1 });
    await snapshots.save({ stream: 'key:c', revision: 31, schemaVersion: 2, state: { fresh: true } });
    expect(await snapshots.load('key:c')).toEqual({ stream: 'key:c', revision: 31, schemaVersion: 2, state: { fresh: true } });
  });
  it('keptAt: the newest kept state at or before a revision and decided by a moment, of its schema version only', async () => {
    const keep = (revision: number, decidedUntil: number, schemaVersion = 4) =>
      db.pool.query('INSERT INTO snapshots_kept (stream, schema_version, revision, decided_until, last_at, state) VALUES ($1, $2, $3, $4, $4, $5)', ['key:k', schemaVersion, revision, decidedUntil, { r: revision }]);
    await keep(19, 1_000);
    await keep(39, 5_000);
    await keep(59, 5_000);
    await keep(79, 9_000, 3);
    const at = async (until: { revision?: number; at?: number }) => (await snapshots.keptAt('key:k', 4, until))?.revision;
    expect([await at({}), await at({ revision: 58 }), await at({ revision: 18 }), await at({ at: 4_999 }), await at({ at: 999 }), await at({ revision: 40, at: 9_999 })]).toEqual([59, 39, undefined, 19, undefined, 39]);
    expect(await snapshots.keptAt('key:other', 4, {})).toBeUndefined();
    // Found by the primary key, backwards from the revision.
    const plan = (await db.pool.query(`EXPLAIN ${KEPT_AT_SQL.replace('$1', "'key:k'").replace('$2', '4').replaceAll('$3', '40').replaceAll('$4', '9999')}`)).rows.map((r) => r['QUERY PLAN']).join('\n');
    expect(plan).toMatch(/Index Scan Backward using snapshots_kept_pkey/);
  });
});

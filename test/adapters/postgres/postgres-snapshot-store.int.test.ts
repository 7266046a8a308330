import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresSnapshotStore } from '../../../src/adapters/postgres/postgres-snapshot-store.js';
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
});

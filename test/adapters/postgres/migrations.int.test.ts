import pg from 'pg';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SchemaNewerError, migrate, migrations } from '../../../src/adapters/postgres/migrations.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

describe('migrate', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  async function database(): Promise<TestDatabase> {
    const db = await createTestDatabase();
    cleanups.push(() => db.drop());
    return db;
  }

  function poolFor(db: TestDatabase): pg.Pool {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    cleanups.push(async () => {
      // pool.end() resolves before its connections have closed; drop() (FORCE) may kill them first.
      pool.on('error', () => undefined);
      await pool.end();
    });
    return pool;
  }

  const appliedVersions = async (pool: pg.Pool): Promise<number[]> =>
    (await pool.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version')).rows.map(
      (row) => row.version,
    );

  it('lists migrations with increasing versions from 1 and distinct names', () => {
    expect(migrations.map((m) => m.version)).toEqual(migrations.map((_, i) => i + 1));
    expect(new Set(migrations.map((m) => m.name)).size).toBe(migrations.length);
  });

  it('applies every migration once and does nothing the second time', async () => {
    const pool = poolFor(await database());
    await migrate(pool);
    const first = await pool.query('SELECT version, name, applied_at FROM schema_migrations ORDER BY version');
    expect(first.rows.map((row) => [row.version, row.name])).toEqual(migrations.map((m) => [m.version, m.name]));

    const query = vi.spyOn(pool, 'query');
    await migrate(pool);
    // A current schema is told by two reads: no transaction, no lock.
    expect(query).toHaveBeenCalledTimes(2);
    query.mockRestore();
    const second = await pool.query('SELECT version, name, applied_at FROM schema_migrations ORDER BY version');
    expect(second.rows).toEqual(first.rows);
  });

  it('is safe when five processes migrate the same database at once', async () => {
    const db = await database();
    const pools = Array.from({ length: 5 }, () => poolFor(db));
    await Promise.all(pools.map((pool) => migrate(pool)));
    expect(await appliedVersions(pools[0]!)).toEqual(migrations.map((m) => m.version));
    const { rows } = await pools[0]!.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public' AND tablename IN ('appends', 'streams', 'snapshots')`,
    );
    expect(rows[0]!.n).toBe(3);
  });

  it('refuses a database a newer release migrated (SchemaNewerError, both versions named), writing nothing: an older process must not write tables it no longer knows', async () => {
    const pool = poolFor(await database());
    await migrate(pool);
    const newer = migrations.at(-1)!.version + 1;
    await pool.query(`INSERT INTO schema_migrations (version, name) VALUES ($1, 'from-the-future')`, [newer]);
    const before = await pool.query('SELECT * FROM schema_migrations ORDER BY version');
    const error = await migrate(pool).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaNewerError);
    expect(error).toMatchObject({ databaseVersion: newer, knownVersion: newer - 1, message: expect.stringContaining(`version ${newer}`) });
    expect((await pool.query('SELECT * FROM schema_migrations ORDER BY version')).rows).toEqual(before.rows);
  });

  it('leaves the database as it was when a migration fails', async () => {
    const pool = poolFor(await database());
    await pool.query('CREATE TABLE events (squatter int)');
    await expect(migrate(pool)).rejects.toMatchObject({ code: '42P07' });
    const { rows } = await pool.query(`SELECT to_regclass('schema_migrations') AS m, to_regclass('streams') AS s`);
    expect(rows[0]).toEqual({ m: null, s: null });
  });

  it('documents every table, view, column and index that the migrations create', async () => {
    const pool = poolFor(await database());
    await migrate(pool);
    // schema_migrations is migrate()'s own bookkeeping, not part of any migration
    // A partition of appends (a week's) is documented by its parent's columns and indexes, and by a comment of its own.
    const relations = `SELECT oid, relname FROM pg_class
      WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'v', 'p') AND NOT relispartition AND relname <> 'schema_migrations'`;
    const partitions = `SELECT oid, relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relispartition AND relkind = 'r'`;
    const { rows } = await pool.query<{ what: string }>(`
      WITH r AS (${relations})
      SELECT r.relname || '.' || a.attname AS what
      FROM pg_attribute a JOIN r ON r.oid = a.attrelid
      WHERE a.attnum > 0 AND NOT a.attisdropped AND col_description(r.oid, a.attnum) IS NULL
      UNION ALL
      SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN r ON r.oid = x.indrelid
      WHERE obj_description(i.oid, 'pg_class') IS NULL
      UNION ALL
      SELECT relname FROM r WHERE obj_description(oid, 'pg_class') IS NULL
      UNION ALL
      SELECT relname FROM (${partitions}) p WHERE obj_description(oid, 'pg_class') IS NULL`);
    expect(rows.map((row) => row.what)).toEqual([]);
    // The check above must have looked at the whole schema, not at an empty one.
    const { rows: found } = await pool.query<{ relname: string }>(`WITH r AS (${relations}) SELECT relname FROM r ORDER BY relname`);
    const { rows: weeks } = await pool.query<{ relname: string }>(`SELECT relname FROM (${partitions}) p ORDER BY relname`);
    expect(weeks.map((r) => r.relname.replace(/\d{8}$/, 'YYYYMMDD'))).toEqual(['appends_archive_rows', 'appends_wYYYYMMDD', 'appends_wYYYYMMDD']);
    expect(found.map((r) => r.relname)).toEqual([
      'appends', 'appends_archive', 'events', 'events_archive', 'jl_archived_weeks', 'jl_jobs', 'jl_key_stats', 'jl_keys', 'jl_lease_grace', 'jl_limit_jobs', 'jl_parked', 'jl_quarantined', 'jl_slots', 'ledger_appends', 'ledger_events', 'ledger_settings', 'projection_checkpoints',
      'snapshots', 'snapshots_kept', 'streams', 'unique_event_ids', 'workers',
    ]);
  });
});

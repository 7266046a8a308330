import { randomBytes } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type pg from 'pg';
import type { Projection } from './projection.js';
import { rebuildSpec, replayInto, type RebuildOptions } from './rebuild.js';
import { inTransaction } from './transaction.js';

/** A row where a live table and the ledger's replay disagree. */
export interface RowDifference {
  readonly table: string;
  /** The row's primary key: column -> value. */
  readonly key: Readonly<Record<string, unknown>>;
  /** missing: the ledger gives the row, the table lacks it; extra: the table has a row the ledger does not give; changed: both have it, some columns differ. */
  readonly kind: 'missing' | 'extra' | 'changed';
  /** changed: each column that differs, with the live value and the one the ledger gives. */
  readonly columns: readonly { readonly column: string; readonly live: unknown; readonly ledger: unknown }[];
}

export interface Verified {
  readonly projection: string;
  /** Events of the ledger replayed. */
  readonly events: number;
  /** Rows each live table holds. */
  readonly rows: Readonly<Record<string, number>>;
  /** In table order, then primary-key order. Empty: the live tables are what the ledger gives. */
  readonly differences: readonly RowDifference[];
}

// Bookkeeping tables the rebuild writes besides the projection's own: copied too, so the replay
// leaves the live ones alone.
const BOOKKEEPING = ['projection_checkpoints'];

/**
 * Replays the whole ledger into scratch copies of the projection's tables, beside the live ones,
 * and reports every row where they differ. Writes nothing: everything happens in one transaction
 * that is rolled back.
 *
 * How: a scratch schema holds empty copies (LIKE ... INCLUDING ALL) of the projection's tables and
 * of its bookkeeping, and the transaction's search_path puts it first, so the rebuild's
 * unqualified statements (rebuild.ts, the projection's own) write there while `events` still
 * resolves to the live ledger.
 *
 * The live tables MUST hold still between the replay's snapshot and the comparison, or an append
 * in between would show up as a difference: they are locked against writes first, in the order lockOut gives,
 * which holds inline appliers off (and waits for those in flight), exactly as a rebuild does; an
 * async runner holding the projection makes it fail with ProjectionBusyError.
 */
export async function verify(pool: pg.Pool, projection: Projection, options: RebuildOptions = {}): Promise<Verified> {
  const spec = rebuildSpec(projection);
  return inTransaction(
    pool,
    async (client) => {
      const id = (name: string) => client.escapeIdentifier(name);
      const tables = [...spec.tables];
      const { rows: located } = await client.query<{ name: string; schema: string }>(
        `SELECT t.name, n.nspname AS schema FROM unnest($1::text[]) AS t (name)
         JOIN pg_class c ON c.oid = to_regclass(t.name) JOIN pg_namespace n ON n.oid = c.relnamespace`,
        [[...tables, ...BOOKKEEPING]],
      );
      const live = new Map(located.map((r) => [r.name, `${id(r.schema)}.${id(r.name)}`]));
      const liveTable = (name: string) => {
        const found = live.get(name);
        if (found === undefined) throw new Error(`verify ${projection.name}: table ${name} does not exist (run jobledger migrate)`);
        return found;
      };
      await client.query(`LOCK TABLE ${tables.map(liveTable).join(', ')} IN EXCLUSIVE MODE`);
      const scratch = id(`jobledger_verify_${randomBytes(6).toString('hex')}`);
      await client.query(`CREATE SCHEMA ${scratch}`);
      for (const name of [...tables, ...BOOKKEEPING]) await client.query(`CREATE TABLE ${scratch}.${id(name)} (LIKE ${liveTable(name)} INCLUDING ALL)`);
      await client.query(`SELECT set_config('search_path', $1 || ', ' || current_setting('search_path'), true)`, [scratch]);
      const { events } = await replayInto(client, projection, spec, options);
      const rows: Record<string, number> = {};
      const differences: RowDifference[] = [];
      for (const name of tables) {
        const found = await compare(client, name, liveTable(name), `${scratch}.${id(name)}`);
        rows[name] = found.rows;
        differences.push(...found.differences);
      }
      return { projection: projection.name, events, rows, differences };
    },
    { rollback: true },
  );
}

/** Rows of `live` and `replayed` (same columns) matched on the live table's primary key. */
async function compare(client: pg.ClientBase, name: string, live: string, replayed: string): Promise<{ rows: number; differences: RowDifference[] }> {
  const { rows: keyColumns } = await client.query<{ column: string }>(
    `SELECT a.attname AS column FROM pg_index i
     JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k (attnum, n) ON true
     JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.n`,
    [live],
  );
  if (keyColumns.length === 0) throw new Error(`verify: table ${name} has no primary key to match rows on`);
  const pk = keyColumns.map((k) => k.column);
  const first = client.escapeIdentifier(pk[0]!);
  // Matched on the key columns themselves and compared column by column (ROW(l.*) expands to each
  // column: the copies have the live table's columns in its order), so the join can use both
  // primary-key indexes; only the rows that differ are turned into JSON.
  const { rows } = await client.query<{ live: Record<string, unknown> | null; ledger: Record<string, unknown> | null }>(
    `SELECT CASE WHEN l.${first} IS NULL THEN NULL ELSE to_jsonb(l) END AS live,
            CASE WHEN r.${first} IS NULL THEN NULL ELSE to_jsonb(r) END AS ledger
     FROM ${live} l FULL JOIN ${replayed} r USING (${pk.map((c) => client.escapeIdentifier(c)).join(', ')})
     WHERE ROW(l.*) IS DISTINCT FROM ROW(r.*)
     ORDER BY ${pk.map((c) => client.escapeIdentifier(c)).join(', ')}`,
  );
  const { rows: counted } = await client.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${live}`);
  const differences = rows.map(({ live: l, ledger: r }): RowDifference => {
    const row = (l ?? r)!;
    const key = Object.fromEntries(pk.map((c) => [c, row[c]]));
    if (l === null) return { table: name, key, kind: 'missing', columns: [] };
    if (r === null) return { table: name, key, kind: 'extra', columns: [] };
    const columns = Object.keys(l)
      .filter((c) => !isDeepStrictEqual(l[c], r[c]))
      .map((column) => ({ column, live: l[column], ledger: r[column] }));
    return { table: name, key, kind: 'changed', columns };
  });
  return { rows: counted[0]!.n, differences };
}


import type pg from 'pg';
import { START, type GlobalPosition } from '../domain/ports/event-store.js';
import { decodeRecorded } from '../domain/recorded.js';
import { EVENT_SCHEMA_KEY } from '../domain/upcasters.js';
import { keyOfStream, type ProjectedEvent, type Projection } from './projection.js';
import { applyStatements, projectAll } from './apply.js';
import { projectionLockSql, saveCheckpoint } from './checkpoint.js';
import { inTransaction } from './transaction.js';
import { eventPrepare, rowOfPrepare, type LedgerRow } from './ledger-rows.js';

/** A row of the ledger as a replay reads it: no ids, no creation time, of the metadata only the schema versions. */
interface ReplayRow extends Pick<LedgerRow, 'position' | 'transaction_id_text' | 'stream' | 'revision' | 'types' | 'data'> {
  /** The events' schema version (metadata), null for version 1: all of the metadata a decoder reads. */
  readonly schema_version: unknown;
  /** Each event's, when their metadata differ (metadatas). */
  readonly schema_versions: readonly unknown[] | null;
}

/** The row's events, decoded, as the projection takes them. */
const projected = (r: ReplayRow, out: ProjectedEvent[]): void => {
  const first = Number(r.revision);
  const commit = BigInt(r.transaction_id_text);
  const position = BigInt(r.position);
  const key = keyOfStream(r.stream);
  r.types.forEach((type, i) => {
    const revision = first + i;
    const schema = r.schema_versions === null ? r.schema_version : r.schema_versions[i];
    const event = decodeRecorded({
      stream: r.stream,
      revision,
      position: { commit, prepare: eventPrepare(position, i) },
      type,
      data: r.data[i]!,
      ...(schema === null || schema === undefined ? {} : { metadata: { [EVENT_SCHEMA_KEY]: schema } }),
    });
    out.push({ event, stream: r.stream, revision, key, commit });
  });
};

/**
 * Holds the inline appliers (the key writer's flushes) off the tables for the rest of the
 * transaction, waiting for those in flight. The tables MUST be locked in the order the
 * projection writes them (READ_MODEL_TABLES' order): a flush that wrote jl_keys and waits for
 * jl_jobs while a rebuild holds jl_jobs and waits for jl_keys would deadlock.
 */
export const lockOut = async (client: pg.ClientBase, tables: readonly string[]): Promise<void> => {
  await client.query(`LOCK TABLE ${tables.map((t) => client.escapeIdentifier(t)).join(', ')} IN EXCLUSIVE MODE`);
};

export interface RebuildOptions {
  /** Events read and applied per round trip, about (default 20,000; a batch ends with a whole transaction). Larger batches hold more jobs' whole lives, each then one INSERT of its final rows. */
  readonly batchSize?: number;
  /** Called after each batch. */
  readonly onProgress?: (progress: { readonly events: number; readonly position: GlobalPosition }) => void;
}

export interface Rebuilt {
  /** Events of the ledger read (the projection applies those of its streams). */
  readonly events: number;
  /** The async checkpoint left behind (START if the ledger was empty). */
  readonly checkpoint: GlobalPosition;
}

/** The projection has no `rebuild` (the dispatcher: a replay would send its messages again). */
export class NotRebuildableError extends Error {
  override readonly name = 'NotRebuildableError';
  constructor(readonly projection: string) {
    super(`projection ${projection} cannot be rebuilt: replaying it would repeat its effects`);
  }
}

/** An async runner holds the projection's lock: stop it first. */
export class ProjectionBusyError extends Error {
  override readonly name = 'ProjectionBusyError';
  constructor(readonly projection: string) {
    super(`projection ${projection} is being applied by an async runner; stop it before rebuilding`);
  }
}

/**
 * Rebuilds a projection from position zero in ONE transaction: empties its tables and its stream
 * revisions, applies every event of the ledger in global order, and leaves an async checkpoint.
 * Refuses a projection without `rebuild`. See replayInto for how it keeps off the live appliers.
 */
export async function rebuild(pool: pg.Pool, projection: Projection, options: RebuildOptions = {}): Promise<Rebuilt> {
  const spec = rebuildSpec(projection);
  return inTransaction(pool, (client) => replayInto(client, projection, spec, options));
}

/** The projection's rebuild spec; NotRebuildableError when it has none (the dispatcher). */
export const rebuildSpec = (projection: Projection): NonNullable<Projection['rebuild']> => {
  if (projection.rebuild === undefined) throw new NotRebuildableError(projection.name);
  return projection.rebuild;
};

/**
 * The body of a rebuild, on `client`, which MUST be inside a transaction the caller ends: COMMIT
 * makes the new rows visible at once, ROLLBACK leaves everything as it was (verify.ts replays
 * into scratch copies this way). Tables are named unqualified, so they resolve through the
 * session's search_path.
 *
 * The tables are emptied with DELETE, not TRUNCATE: TRUNCATE takes an ACCESS EXCLUSIVE lock that
 * would block every reader (dashboards, `jobledger keys`, the sweeper) until the rebuild commits;
 * with DELETE they go on seeing the old rows until then, as if fresh tables were swapped in.
 *
 * It must not race the live appliers, so before reading it:
 * - takes the projection's advisory lock for the transaction (refused while an async runner
 *   holds it: ProjectionBusyError);
 * - locks the projection's tables against writes (lockOut): flushes with inline projections wait
 *   until the rebuild commits, and those in flight are waited for.
 * Then it takes a snapshot and reads exactly the events committed in it, in the rebuild's own
 * transaction. Not `EventStore.readAll`: readAll stops at the oldest open transaction's id, and
 * the appends queued behind the lock are open, so it would leave out events that committed
 * after them (and that inline mode had applied). An event that commits later (async mode, or an
 * append queued behind the lock) is not in the snapshot, nor is any later event of its stream:
 * it is applied after the rebuild by the runner or inline, on top of the rows written here. The
 * checkpoint is the last event below the snapshot's xmin, for an async runner to resume from;
 * the snapshot itself goes with it, so the runner passes over the events past the checkpoint the
 * rebuild applied already (they are the ones the snapshot sees).
 *
 * On a pipelining client the next batch is read while this one is mapped and written (its
 * SELECT goes out first), so the server never waits for the mapping; the events come without
 * the columns a projection does not read (event id, creation time, the metadata but its schema version).
 */
export async function replayInto(
  client: pg.ClientBase,
  projection: Projection,
  spec: NonNullable<Projection['rebuild']>,
  options: RebuildOptions = {},
): Promise<Rebuilt> {
  const batchSize = options.batchSize ?? 20_000;
  const { rows: locked } = await client.query<{ ok: boolean }>(`SELECT pg_try_advisory_xact_lock(${projectionLockSql(1)}) AS ok`, [projection.name]);
  if (!locked[0]!.ok) throw new ProjectionBusyError(projection.name);
  await lockOut(client, spec.tables);
  for (const table of spec.tables) await client.query(`DELETE FROM ${client.escapeIdentifier(table)}`);
  const { rows: snap } = await client.query<{ snapshot: string; xmin: string }>(
    'SELECT pg_current_snapshot()::text AS snapshot, pg_snapshot_xmin(pg_current_snapshot())::text AS xmin',
  );
  const { snapshot } = snap[0]!;
  const xmin = BigInt(snap[0]!.xmin);
  const pipelined = (client as { pipeline?: boolean }).pipeline === true;
  const read = (after: GlobalPosition) => {
    const rows = client.query<ReplayRow>(REPLAY_SQL, [after.commit.toString(), rowOfPrepare(after.prepare).position.toString(), snapshot, batchSize]);
    // Awaited on the next turn; a failure must not go unhandled if applying this batch fails first.
    rows.catch(() => undefined);
    return rows;
  };
  let checkpoint = START;
  let events = 0;
  let next = read(START);
  for (;;) {
    const { rows } = await next;
    if (rows.length === 0) break;
    const last = rows.at(-1)!;
    // Rows come in global order, whole transactions; the next batch starts after the last row's last event.
    const after = { commit: BigInt(last.transaction_id_text), prepare: eventPrepare(BigInt(last.position), last.types.length - 1) };
    const more = rows.reduce((n, row) => n + row.types.length, 0) >= batchSize;
    if (more && pipelined) next = read(after);
    const batch: ProjectedEvent[] = [];
    for (const row of rows) projected(row, batch);
    await applyStatements(client, projectAll([projection], batch));
    events += batch.length;
    // The last event below xmin is the newest position fully applied.
    for (let i = rows.length - 1; i >= 0; i--) {
      const row = rows[i]!;
      const commit = BigInt(row.transaction_id_text);
      if (commit < xmin) {
        checkpoint = { commit, prepare: eventPrepare(BigInt(row.position), row.types.length - 1) };
        break;
      }
    }
    options.onProgress?.({ events, position: after });
    if (!more) break;
    if (!pipelined) next = read(after);
  }
  // The checkpoint stays below the snapshot's xmin (a transaction open then may still commit
  // below anything read here); the snapshot says which events past it were applied already.
  await saveCheckpoint(client, projection.name, checkpoint, { force: true, appliedSnapshot: snapshot });
  return { events, checkpoint };
}

// The rows committed in the rebuild's snapshot after a position ($1, $2: the row of the last
// event applied; a batch ends with a whole row), up to the one that brings `$4` events, and then
// the rest of its transaction: projections take whole transactions (./projection.ts). Both scans
// walk appends_global_order (and appends_archive_global_order: ledger_appends is both tables) from
// the position, and the count stops at that row, so a batch costs its size, not the ledger's.
// Rows, not events: each row's events are decoded here (one JSON array of data a row).
// No column keeps its name under a cast: ORDER BY would sort by the text (regression: a batch
// ended at global position 999999 inside a transaction whose 1000000 had sorted first, and the
// next batch replayed that transaction again). int8 arrives as a string anyway.
const AFTER = `(transaction_id, position) > ($1::xid8, $2::bigint) AND pg_visible_in_snapshot(transaction_id, $3::pg_snapshot)`;
export const REPLAY_SQL = `
SELECT position, transaction_id::text AS transaction_id_text, stream, revision, types, data, metadata -> '${EVENT_SCHEMA_KEY}' AS schema_version,
       CASE WHEN metadatas IS NOT NULL THEN ARRAY(SELECT m -> '${EVENT_SCHEMA_KEY}' FROM jsonb_array_elements(metadatas) AS m) END AS schema_versions
FROM ledger_appends
WHERE ${AFTER}
  AND transaction_id <= coalesce(
    (SELECT transaction_id FROM (
       SELECT transaction_id, sum(cardinality(types)) OVER (ORDER BY transaction_id, position) AS events FROM ledger_appends WHERE ${AFTER}
     ) upto WHERE events >= $4 LIMIT 1),
    '18446744073709551615'::xid8)
ORDER BY transaction_id, position`;

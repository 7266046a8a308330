
import type pg from 'pg';
import { START, type GlobalPosition, type JsonObject } from '../domain/ports/event-store.js';
import { decodeRecorded } from '../domain/recorded.js';
import { EVENT_SCHEMA_KEY } from '../domain/upcasters.js';
import { keyOfStream, type ProjectedEvent, type Projection } from './projection.js';
import { applyStatements, projectAll } from './apply.js';
import { projectionLockSql, saveCheckpoint } from './checkpoint.js';
import { inTransaction } from './transaction.js';

interface ReplayRow {
  /** int8, which pg hands over as a string. */
  readonly global_position: string;
  readonly transaction_id_text: string;
  readonly stream: string;
  readonly stream_revision: string;
  readonly type: string;
  readonly data: JsonObject;
  /** The event's schema version (metadata), null for version 1: all of the metadata a decoder reads. */
  readonly schema_version: unknown;
}

const projected = (r: ReplayRow): ProjectedEvent => {
  const revision = Number(r.stream_revision);
  return {
    event: decodeRecorded({
      stream: r.stream,
      revision,
      position: { commit: BigInt(r.transaction_id_text), prepare: BigInt(r.global_position) },
      type: r.type,
      data: r.data,
      ...(r.schema_version === null ? {} : { metadata: { [EVENT_SCHEMA_KEY]: r.schema_version } }),
    }),
    stream: r.stream,
    revision,
    key: keyOfStream(r.stream),
    commit: BigInt(r.transaction_id_text),
  };
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
    const rows = client.query<ReplayRow>(REPLAY_SQL, [after.commit.toString(), after.prepare.toString(), snapshot, batchSize]);
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
    const after = { commit: BigInt(last.transaction_id_text), prepare: BigInt(last.global_position) };
    const more = rows.length >= batchSize;
    if (more && pipelined) next = read(after);
    await applyStatements(client, projectAll([projection], rows.map(projected)));
    events += rows.length;
    // Rows come in global order: the last one below xmin is the newest position fully applied.
    for (let i = rows.length - 1; i >= 0; i--) {
      const commit = BigInt(rows[i]!.transaction_id_text);
      if (commit < xmin) {
        checkpoint = { commit, prepare: BigInt(rows[i]!.global_position) };
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

// The events committed in the rebuild's snapshot after a position, `$4` of them and then the rest
// of the last one's transaction: projections take whole transactions (./projection.ts). Both
// scans walk events_global_order (and events_archive_global_order: ledger_events is both tables)
// from the position, so a batch costs its size, not the ledger's.
// No column keeps its name under a cast: ORDER BY would sort by the text (regression: a batch
// ended at global position 999999 inside a transaction whose 1000000 had sorted first, and the
// next batch replayed that transaction again). int8 arrives as a string anyway.
const AFTER = `(transaction_id, global_position) > ($1::xid8, $2::bigint) AND pg_visible_in_snapshot(transaction_id, $3::pg_snapshot)`;
export const REPLAY_SQL = `
SELECT global_position, transaction_id::text AS transaction_id_text, stream, stream_revision, type, data, metadata -> '${EVENT_SCHEMA_KEY}' AS schema_version FROM ledger_events
WHERE ${AFTER}
  AND transaction_id <= coalesce(
    (SELECT transaction_id FROM ledger_events WHERE ${AFTER} ORDER BY transaction_id, global_position OFFSET $4 - 1 LIMIT 1),
    '18446744073709551615'::xid8)
ORDER BY transaction_id, global_position`;

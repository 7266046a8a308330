import type pg from 'pg';
import type { EventToAppend } from '../../src/domain/ports/event-store.js';

/**
 * An append (expected revision 'any') left open until `commit()`: its transaction has an id and
 * has written its event, which thus commits late. `written` resolves once it is in that state.
 * Written in SQL of its own (the store's transactions never wait between write and commit), as
 * the store writes it through the port: a row of appends, its given id in unique_event_ids.
 */
export function heldAppend(pool: pg.Pool, stream: string, event: EventToAppend) {
  const open = (async () => {
    const client = await pool.connect();
    await client.query('BEGIN');
    const { rows } = await client.query<{ revision: string }>(
      `INSERT INTO streams (stream, revision) VALUES ($1, 0)
       ON CONFLICT (stream) DO UPDATE SET revision = streams.revision + 1, transaction_id = pg_current_xact_id()
       RETURNING revision`,
      [stream],
    );
    await client.query(
      `WITH e AS (INSERT INTO appends (stream, revision, types, ids, data, metadata) VALUES ($1, $2, ARRAY[$3], ARRAY[coalesce($6::uuid, gen_random_uuid())], jsonb_build_array($4::jsonb), $5) RETURNING ids)
       INSERT INTO unique_event_ids (event_id) SELECT $6::uuid WHERE $6::uuid IS NOT NULL`,
      [stream, rows[0]!.revision, event.type, JSON.stringify(event.data), JSON.stringify(event.metadata ?? {}), event.eventId ?? null],
    );
    return client;
  })();
  const end = async () => {
    const client = await open;
    await client.query('COMMIT');
    client.release();
  };
  return {
    written: open.then(() => undefined),
    /** Lets the transaction commit, and waits for it. */
    commit: end,
    /** Lets it go without waiting (teardown). */
    release: () => void end().catch(() => undefined),
  };
}

import type pg from 'pg';
import type { EventToAppend } from '../../src/domain/ports/event-store.js';

/**
 * An append (expected revision 'any') left open until `commit()`: its transaction has an id and
 * has written its event, which thus commits late. `written` resolves once it is in that state.
 * Written in SQL of its own (the store's transactions never wait between write and commit).
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
    await client.query(`INSERT INTO events (stream, stream_revision, type, data, metadata, event_id) VALUES ($1, $2, $3, $4, $5, coalesce($6::uuid, gen_random_uuid()))`, [
      stream,
      rows[0]!.revision,
      event.type,
      JSON.stringify(event.data),
      JSON.stringify(event.metadata ?? {}),
      event.eventId ?? null,
    ]);
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

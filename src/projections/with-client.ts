import type pg from 'pg';

/**
 * Runs `fn` on a client checked out of the pool, then gives it back; `discard()` throws it away
 * instead. While it is out the client MUST have an 'error' listener: a connection lost meanwhile
 * makes pg emit 'error' on it, the pool listens only while the client is idle, and an unheard
 * 'error' ends the process. The query in flight fails by itself; the lost client is discarded.
 */
export async function withClient<T>(pool: pg.Pool, fn: (client: pg.PoolClient, discard: () => void) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken = false;
  const discard = () => {
    broken = true;
  };
  client.on('error', discard);
  try {
    return await fn(client, discard);
  } finally {
    // A broken client is ended by the pool, which no longer listens to it: its late errors stay heard.
    if (!broken) client.off('error', discard);
    client.release(broken);
  }
}

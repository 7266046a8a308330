import type pg from 'pg';
import { withClient } from './with-client.js';

// The one way this code opens a transaction of its own on the pool (projection batches, rebuilds,
// verify's dry run, migrations, the archive's moves), and the type of what runs a query inside one
// or outside. Not the key writer's (src/adapters/eventstore/postgres/write-transaction.ts): it
// pipelines its BEGIN with the appends on purpose, one round trip.

/** Anything that runs a query: a pg.PoolClient, a pg.Client (inside a transaction), a pg.Pool. */
export type Queryable = Pick<pg.ClientBase, 'query'>;

export interface TransactionOptions {
  /** Roll back even when `fn` returns: a dry run, whose writes must not stay (verify). */
  readonly rollback?: boolean;
}

/**
 * Runs `fn` in a transaction on a client of the pool: COMMIT if it returns (ROLLBACK with
 * `rollback`), ROLLBACK if it throws. A client whose ROLLBACK fails is thrown away, not given back
 * to the pool in the middle of a transaction.
 *
 * READ COMMITTED whatever the server's default_transaction_isolation: callers that wait for a
 * lock and then read (migrate re-reads schema_migrations, a rebuild reads past its table locks)
 * MUST see what committed while they waited, which a snapshot taken before the wait would hide.
 */
export const inTransaction = <T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>, options: TransactionOptions = {}): Promise<T> =>
  withClient(pool, async (client, discard) => {
    await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
    try {
      const result = await fn(client);
      // A dry run's failed ROLLBACK loses nothing (its writes were never to stay): the result stands.
      if (options.rollback === true) await client.query('ROLLBACK').catch(discard);
      else await client.query('COMMIT');
      return result;
    } catch (error) {
      await client.query('ROLLBACK').catch(discard);
      throw error;
    }
  });

import { join, resolve } from 'node:path';
import type { Pool } from 'pg';
import { isConnectionError } from '../postgres/outage.js';

export interface Database {
  readonly url: string;
  readonly describe: string;
  /**
   * `error` as one line naming where the URL came from and what was tried, when it says the
   * database could not be reached or refused the session; any other error as it is.
   */
  explain(error: unknown): unknown;
  close(): Promise<void>;
}

/** Where the embedded PostgreSQL keeps its data: $JOBLEDGER_HOME, else .jobledger in the working directory. */
export const jobledgerHome = (): string => resolve(process.env.JOBLEDGER_HOME ?? join(process.cwd(), '.jobledger'));

const URL_SCHEMES = ['postgres:', 'postgresql:', 'socket:'];

/** What pg tries for `url`: host:port/database, never the user's password. */
const targetOf = async (url: string): Promise<string> => {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: url });
  return `${client.host}:${client.port}/${client.database ?? ''}`;
};

/** A session refused before any statement: no such database (3D000), authentication (class 28). */
const isRefusedSession = (error: unknown): boolean => {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (code === '3D000' || code.startsWith('28'));
};

const fromEnvironment = async (url: string): Promise<Database> => {
  let valid: boolean;
  try {
    valid = URL_SCHEMES.includes(new URL(url).protocol);
  } catch {
    valid = false;
  }
  // The value is not echoed: it may hold a password.
  if (!valid) throw new Error('DATABASE_URL: not a PostgreSQL URL (expected postgres://user:password@host:port/database)');
  const target = await targetOf(url);
  return {
    url,
    describe: `DATABASE_URL (${target})`,
    explain: (error) =>
      isConnectionError(error) || isRefusedSession(error) ? new Error(`DATABASE_URL: cannot connect to PostgreSQL at ${target}: ${(error as Error).message}`, { cause: error }) : error,
    close: async () => undefined,
  };
};

/**
 * DATABASE_URL when set; otherwise the embedded PostgreSQL in the jobledger home, started on
 * demand and shared by every jobledger process using that home: close() stops it only when no
 * other live process uses it (a long-running worker keeps it up for the short commands around
 * it). A server left behind by a killed process is reused, never doubled, and stopped by the
 * next last one out.
 */
export const openDatabase = async (log: (line: string) => void): Promise<Database> => {
  const url = process.env.DATABASE_URL;
  if (url) return fromEnvironment(url);
  const { startEmbeddedPostgres } = await import('../postgres/embedded-server.js');
  const server = await startEmbeddedPostgres({ dataDir: join(jobledgerHome(), 'pg'), persistent: true, log });
  const describe = `embedded PostgreSQL in ${server.dataDir}`;
  return {
    url: server.url,
    describe,
    explain: (error) => (isConnectionError(error) ? new Error(`${describe}: ${(error as Error).message}`, { cause: error }) : error),
    close: () => server.stop(),
  };
};

/**
 * Connects once, so that a one-shot command finds an unreachable database before the ledger opens
 * (which would log an outage and retry): the pool's first connection, given back to it for the
 * command's statements. Long-running commands (worker, serve) skip it: they wait for the database.
 */
export const checkReachable = async (db: Database, pool: Pick<Pool, 'connect'>): Promise<void> => {
  try {
    (await pool.connect()).release();
  } catch (error) {
    throw db.explain(error);
  }
};

import { join, resolve } from 'node:path';
import { startEmbeddedPostgres, type EmbeddedServer } from '../postgres/embedded-server.js';

export interface Database {
  readonly url: string;
  readonly describe: string;
  close(): Promise<void>;
}

/** Where the embedded PostgreSQL keeps its data: $JOBLEDGER_HOME, else .jobledger in the working directory. */
export const jobledgerHome = (): string => resolve(process.env.JOBLEDGER_HOME ?? join(process.cwd(), '.jobledger'));

/**
 * DATABASE_URL when set; otherwise the embedded PostgreSQL in the jobledger home, started on
 * demand and shared by every jobledger process using that home: close() stops it only when no
 * other live process uses it (a long-running worker keeps it up for the short commands around
 * it). A server left behind by a killed process is reused, never doubled, and stopped by the
 * next last one out.
 */
export const openDatabase = async (log: (line: string) => void): Promise<Database> => {
  const url = process.env.DATABASE_URL;
  if (url) return { url, describe: 'DATABASE_URL', close: async () => undefined };
  const home = jobledgerHome();
  const server: EmbeddedServer = await startEmbeddedPostgres({ dataDir: join(home, 'pg'), persistent: true, log });
  return { url: server.url, describe: `embedded PostgreSQL in ${server.dataDir}`, close: () => server.stop() };
};

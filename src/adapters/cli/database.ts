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
 * demand and reused across runs (a server left behind by a killed process is reused, not doubled).
 */
export const openDatabase = async (log: (line: string) => void): Promise<Database> => {
  const url = process.env.DATABASE_URL;
  if (url) return { url, describe: 'DATABASE_URL', close: async () => undefined };
  const home = jobledgerHome();
  const server: EmbeddedServer = await startEmbeddedPostgres({ dataDir: join(home, 'pg'), persistent: true, log });
  return { url: server.url, describe: `embedded PostgreSQL in ${server.dataDir}`, close: () => server.stop() };
};

/**
 * Databases on a Citus cluster, for the `citus` vitest project (test/citus/*.citus.test.ts).
 *
 * The cluster is JOBLEDGER_CITUS_URL: a coordinator's URL, its workers registered (as
 * ../shared/citus/cluster.sh starts them: `cluster.sh start` prints the URL; .ci/run builds Citus
 * and starts it). Each test file gets a database of its own on every node, the citus extension
 * in each and the workers added to its coordinator, as cluster.sh does for one database.
 *
 *   const db = await createCitusDatabase();   // empty, distributed by the first migrate
 *   ... db.url is the coordinator's ...
 *   await db.drop();
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export interface CitusDatabase {
  /** The coordinator's URL for this database. */
  readonly url: string;
  drop(): Promise<void>;
}

export const citusUrl = (): string => {
  const url = process.env.JOBLEDGER_CITUS_URL;
  if (!url) throw new Error('JOBLEDGER_CITUS_URL is not set: the citus project runs on a Citus cluster (../shared/citus/cluster.sh start prints its URL; npm run test:citus)');
  return url;
};

const onDatabase = (base: string, host: string, port: number, database: string): string => {
  const url = new URL(base);
  url.hostname = host;
  url.port = String(port);
  url.pathname = `/${database}`;
  return url.toString();
};

const run = async (url: string, statements: readonly string[]): Promise<void> => {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    for (const sql of statements) await client.query(sql);
  } finally {
    await client.end().catch(() => undefined);
  }
};

/** A fresh database on the coordinator and each worker of JOBLEDGER_CITUS_URL's cluster, the workers added to it. */
export const createCitusDatabase = async (): Promise<CitusDatabase> => {
  const base = citusUrl();
  const name = `jl_c_${process.pid}_${randomBytes(4).toString('hex')}`;
  const coordinator = new URL(base);
  const admin = new pg.Client({ connectionString: base });
  await admin.connect();
  const { rows: workers } = await admin.query<{ nodename: string; nodeport: number }>(`SELECT nodename, nodeport FROM pg_dist_node WHERE noderole = 'primary' AND groupid <> 0 ORDER BY nodeport`);
  await admin.end();
  if (workers.length === 0) throw new Error(`the Citus coordinator at ${coordinator.host} has no workers`);
  const nodes = [{ host: coordinator.hostname, port: Number(coordinator.port || 5432) }, ...workers.map((w) => ({ host: w.nodename, port: w.nodeport }))];
  for (const node of nodes) {
    await run(onDatabase(base, node.host, node.port, 'postgres'), [`CREATE DATABASE ${name}`]);
    await run(onDatabase(base, node.host, node.port, name), ['CREATE EXTENSION citus']);
  }
  const url = onDatabase(base, nodes[0]!.host, nodes[0]!.port, name);
  await run(url, [`SELECT citus_set_coordinator_host('${nodes[0]!.host}', ${nodes[0]!.port})`, ...workers.map((w) => `SELECT citus_add_node('${w.nodename}', ${w.nodeport})`)]);
  return {
    url,
    async drop() {
      for (const node of [...nodes].reverse()) await run(onDatabase(base, node.host, node.port, 'postgres'), [`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`]).catch(() => undefined);
    },
  };
};

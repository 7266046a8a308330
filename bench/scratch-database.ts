// What the bench scripts share: the server they measure and scratch databases on it.
import pg from 'pg';

/** DATABASE_URL, else the machine's PostgreSQL. */
export const serverUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** The server, for printing (no credentials). */
export const serverName = serverUrl.replace(/\/\/[^@]*@/, '//');

const admin = async (sql: string) => {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
};

/** Creates database `name` on the server, runs `use` with its URL, and drops it afterwards (unless `keep`: then it says which it kept). */
export const withScratchDatabase = async <T>(name: string, use: (url: string) => Promise<T>, options: { readonly keep?: boolean } = {}): Promise<T> => {
  const db = `jobledger_bench_${name.replace(/\W+/g, '_')}_${process.pid}`;
  await admin(`CREATE DATABASE ${db}`);
  const url = new URL(serverUrl);
  url.pathname = `/${db}`;
  try {
    return await use(url.toString());
  } finally {
    if (options.keep === true) console.log(`kept database ${db}`);
    else await admin(`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`);
  }
};

const noop = () => undefined;
/** The benches measure; they do not log. */
export const quiet = { child: () => quiet, error: noop, warn: noop, info: noop, debug: noop, trace: noop };

export const quantile = (sorted: readonly number[], q: number): number => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;

/**
 * What the environment adds to every node start, for the CLI's figures: NODE_EXTRA_CA_CERTS makes
 * node read and parse that bundle before any of our code runs (~55 ms for `node -e ''` on the
 * project's machine, whose environment sets it, and ~110 ms for `jobledger keys`).
 */
export const startCostNote = (): string =>
  process.env.NODE_EXTRA_CA_CERTS === undefined
    ? 'NODE_EXTRA_CA_CERTS is unset'
    : `NODE_EXTRA_CA_CERTS is set (${process.env.NODE_EXTRA_CA_CERTS}): node parses it at every start, in these figures; \`env -u NODE_EXTRA_CA_CERTS\` measures without it`;

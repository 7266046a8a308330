// The ledger bench:reads measures on: what it holds, and building it (or finding it built).
//
// It is made through the library's public API by three processes at once (bench/reads-build.ts,
// one per part), each its own client with its own key writer, as producers and workers would:
//
// - big:      the key `bench/big` (limit 1): jobs arrive 100 at a time and run one after the
//             other, each completed with a direct handoff to the next (one append per job, as a
//             worker's), until `bigParked` arrive at the end and stay parked behind one unstarted
//             holder; and beside it the key `bench/renewer`, whose one job renews its lease
//             `renewals` times (each renewal its own append, as a worker's heartbeat) and completes.
// - capped:   `cappedJobs` jobs without a key on the queue `capped`, capped at CAP: CAP hold its
//             slots unstarted, the others wait in its line.
// - ordinary: `ordinaryKeys` keys (limit 2) whose jobs run to completion, four at a time per key
//             (two park and are promoted), one in 97 failing on its only attempt (dead), until the
//             ledger holds `events`.
//
// Nothing is left that the sweeper of `jobledger serve` would act on (no started lease, no job due
// later): measuring does not change the ledger, and a later run measures the same one. The
// database says what it holds (a marker table, BUILD_VERSION and the scale): a run finding it
// reuses it, one finding anything else builds it again.
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import pg from 'pg';
import { migrate } from '../src/index.js';

/** Bump when what is built changes: a database built otherwise is built again (2: kept snapshots, migration 20). */
export const BUILD_VERSION = 2;

export interface Scale {
  readonly name: 'full' | 'quick';
  readonly events: number;
  /** Events of the key bench/big, its parked jobs at the end included. */
  readonly bigEvents: number;
  readonly bigParked: number;
  readonly renewals: number;
  readonly cappedJobs: number;
  readonly ordinaryKeys: number;
}

export const SCALES: Record<Scale['name'], Scale> = {
  full: { name: 'full', events: 1_000_000, bigEvents: 100_000, bigParked: 3_000, renewals: 5_000, cappedJobs: 20_000, ordinaryKeys: 10_000 },
  quick: { name: 'quick', events: 50_000, bigEvents: 10_000, bigParked: 300, renewals: 500, cappedJobs: 2_000, ordinaryKeys: 1_000 },
};

export const BIG_KEY = 'bench/big';
export const RENEW_KEY = 'bench/renewer';
export const RENEW_JOB = 'renewer-1';
export const CAPPED_QUEUE = 'capped';
export const CAP = 10;
/** The ordinary keys are ORDINARY_PREFIX + n. */
export const ORDINARY_PREFIX = 'o/';

/** The events of the renewer's key: its limit, the job's arrival and admission, start, renewals, completion and release. */
export const renewerEvents = (scale: Scale): number => 6 + scale.renewals;
/** The queue's cap, and per job its arrival and admission or wait on its own stream and its hold or wait on the cap's. */
export const cappedEvents = (scale: Scale): number => 1 + 3 * scale.cappedJobs;
/** What the ordinary traffic fills up to the ledger's size. */
export const ordinaryEvents = (scale: Scale): number => scale.events - scale.bigEvents - renewerEvents(scale) - cappedEvents(scale);

/** What the reads are asked about, found while building. */
export interface Subjects {
  readonly bigKey: string;
  /** The last parked job of the big key: the back of its line. */
  readonly bigParkedJob: string;
  readonly renewJob: string;
  /** The last job of the capped queue: the back of its cap's line. */
  readonly cappedJob: string;
  /** An ordinary key with no dead job (`retry --key K --dead` on it changes nothing). */
  readonly ordinaryKey: string;
  /** A moment halfway through the big key's history (epoch ms), for `state --at`. */
  readonly midBuildAt: number;
}

/** A part's report on its stdout, one JSON object a line: progress, then its result. */
export type PartLine = { readonly part: string; readonly done: number; readonly of: number; readonly unit: string } | { readonly part: string; readonly result: Partial<Subjects> };

export interface Built {
  readonly subjects: Subjects;
  readonly events: number;
  /** How long the build took (ms), when this run or an earlier one built it. */
  readonly buildMs: number;
  readonly builtAt: Date;
  readonly reused: boolean;
}

const MARKER = 'bench_reads_ledger';

export const eventCount = async (pool: pg.Pool): Promise<number> => Number((await pool.query<{ n: string }>('SELECT coalesce(sum(cardinality(types)), 0) AS n FROM appends')).rows[0]!.n);

const withClient = async <T>(url: string, use: (client: pg.Client) => Promise<T>): Promise<T> => {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await use(client);
  } finally {
    await client.end();
  }
};

/** What the database holds, if it is a ledger this version built at this scale. */
const readMarker = async (url: string, scale: Scale): Promise<Omit<Built, 'reused'> | 'none' | 'other'> =>
  withClient(url, async (client) => {
    const { rows: tables } = await client.query<{ marker: boolean; any: boolean }>(
      `SELECT to_regclass($1) IS NOT NULL AS marker, EXISTS (SELECT 1 FROM pg_class WHERE relnamespace = 'public'::regnamespace) AS any`,
      [MARKER],
    );
    if (!tables[0]!.marker) return tables[0]!.any ? 'other' : 'none';
    const { rows } = await client.query<{ version: number; scale: string; subjects: Subjects; events: string; build_ms: string; built_at: Date }>(`SELECT * FROM ${MARKER}`);
    const m = rows[0];
    if (m === undefined || m.version !== BUILD_VERSION || m.scale !== scale.name) return 'other';
    return { subjects: m.subjects, events: Number(m.events), buildMs: Number(m.build_ms), builtAt: m.built_at };
  });

const databaseOf = (url: string): string => decodeURIComponent(new URL(url).pathname.slice(1));

/** The server's `postgres` database, from which databases are made and dropped. */
const adminUrl = (url: string): string => {
  const admin = new URL(url);
  admin.pathname = '/postgres';
  return admin.toString();
};

/**
 * Holds the ledger's database for this run (a session advisory lock on the server, named after
 * it) until `release`: a second run would measure beside this one, or drop its database (--rebuild).
 */
export const lockLedger = async (url: string): Promise<{ release(): Promise<void> }> => {
  const client = new pg.Client({ connectionString: adminUrl(url) });
  await client.connect();
  const { rows } = await client.query<{ ok: boolean }>('SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS ok', [`jobledger:bench:reads:${databaseOf(url)}`]);
  if (!rows[0]!.ok) {
    await client.end();
    throw new Error(`another bench:reads run is using the database ${databaseOf(url)}; run this one once it is done, or give --database-url another`);
  }
  return { release: () => client.end() };
};

/** The database of `url` on its server, dropped first when `fresh`: only one of this bench's (its name says so). */
const createDatabase = async (url: string, fresh: boolean): Promise<void> => {
  const name = databaseOf(url);
  await withClient(adminUrl(url), async (client) => {
    const exists = (await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 1;
    if (exists && !fresh) return;
    if (exists) {
      if (!name.startsWith('jobledger_bench_reads')) throw new Error(`database ${name} holds something else than this bench's ledger; give --database-url a database named jobledger_bench_reads… (it is dropped and built again) or a new one`);
      await client.query(`DROP DATABASE ${pg.escapeIdentifier(name)} WITH (FORCE)`);
    }
    await client.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
  });
};

/** Runs one part (bench/reads-build.ts) in a process of its own; `progress` gets its lines. */
const runPart = (part: string, url: string, scale: Scale, progress: (line: PartLine) => void): Promise<Partial<Subjects>> =>
  new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [new URL('./reads-build.js', import.meta.url).pathname, part, scale.name, url], { stdio: ['ignore', 'pipe', 'pipe'] });
    let result: Partial<Subjects> | undefined;
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    createInterface({ input: child.stdout }).on('line', (text) => {
      const line = JSON.parse(text) as PartLine;
      if ('result' in line) result = line.result;
      else progress(line);
    });
    child.on('error', reject);
    child.on('close', (code) => (code === 0 && result !== undefined ? resolve(result) : reject(new Error(`build part ${part} exited ${code}: ${stderr.trim()}`))));
  });

/** Builds the ledger at `url` (a fresh database), printing progress on stderr. */
const build = async (url: string, scale: Scale): Promise<Omit<Built, 'reused'>> => {
  const started = performance.now();
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    // Once here, so the parts do not queue on each other's migrations.
    await migrate(pool);
    const shown = new Map<string, string>();
    const show = () => process.stderr.write(`\r  ${[...shown.values()].join(' · ')} (${Math.round((performance.now() - started) / 1000)} s)   `);
    const timer = setInterval(show, 2_000);
    const parts = ['big', 'capped', 'ordinary'];
    let results: Partial<Subjects>[];
    try {
      results = await Promise.all(parts.map((part) => runPart(part, url, scale, (l) => 'done' in l && shown.set(l.part, `${l.part} ${l.done.toLocaleString()}/${l.of.toLocaleString()} ${l.unit}`))));
    } finally {
      clearInterval(timer);
      show();
      process.stderr.write('\n');
    }
    const subjects = Object.assign({}, ...results) as Subjects;
    const events = await eventCount(pool);
    const buildMs = performance.now() - started;
    // The statistics autovacuum would gather soon after such a load, so that the first run's plans are the later runs'.
    await pool.query('VACUUM ANALYZE');
    await pool.query(`CREATE TABLE ${MARKER} (version int NOT NULL, scale text NOT NULL, subjects jsonb NOT NULL, events bigint NOT NULL, build_ms bigint NOT NULL, built_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await pool.query<{ built_at: Date }>(`INSERT INTO ${MARKER} (version, scale, subjects, events, build_ms) VALUES ($1, $2, $3, $4, $5) RETURNING built_at`, [
      BUILD_VERSION,
      scale.name,
      JSON.stringify(subjects),
      events,
      Math.round(buildMs),
    ]);
    return { subjects, events, buildMs, builtAt: rows[0]!.built_at };
  } finally {
    await pool.end();
  }
};

/** The ledger at `url`: found built (same version and scale), or built now. */
export const ensureLedger = async (url: string, scale: Scale, options: { readonly rebuild: boolean }): Promise<Built> => {
  await createDatabase(url, false);
  const found = options.rebuild ? 'other' : await readMarker(url, scale);
  if (typeof found === 'object') return { ...found, reused: true };
  if (found === 'other') await createDatabase(url, true);
  return { ...(await build(url, scale)), reused: false };
};

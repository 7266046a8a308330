import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listJobsQuery, type JobFilter } from '../../../src/adapters/postgres/queries/list-jobs.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/database.js';

// Every query of src/adapters/postgres/queries/ that a module exports as a `*_SQL` constant, as
// the code runs it (STYLE.md: test the query you run, not a copy), planned against the current
// schema: a renamed column or dropped table fails here, for a query added later as well. Each is
// prepared, so PostgreSQL infers its parameters' types, and EXPLAINed as the generic plan the
// pool's repeated executions settle on, with a dummy value of each type.

const DIRECTORY = new URL('../../../src/adapters/postgres/queries/', import.meta.url);

interface Query {
  readonly name: string;
  readonly text: string;
}

const exportedQueries = async (): Promise<Query[]> => {
  const files = readdirSync(fileURLToPath(DIRECTORY)).filter((f) => f.endsWith('.ts')).sort();
  const queries: Query[] = [];
  for (const file of files) {
    const module = (await import(new URL(file, DIRECTORY).href)) as Record<string, unknown>;
    for (const [name, text] of Object.entries(module)) if (name.endsWith('_SQL') && typeof text === 'string') queries.push({ name: `${file}: ${name}`, text });
  }
  return queries;
};

/** A value of the parameter type PostgreSQL inferred (format_type's spelling), in its text form. */
const dummyOf = (type: string): string => {
  if (type.endsWith('[]')) return `{${dummyOf(type.slice(0, -2))}}`;
  if (/^(integer|bigint|smallint|numeric|double precision|real)$/.test(type)) return '1';
  if (type === 'boolean') return 'false';
  if (type.startsWith('timestamp')) return '1970-01-01T00:00:00Z';
  if (type === 'jsonb' || type === 'json') return '{}';
  return 'x';
};

let db: MigratedDatabase;
let client: pg.PoolClient;
let queries: Query[];

beforeAll(async () => {
  db = await createMigratedDatabase(1);
  client = await db.pool.connect();
  await client.query('SET plan_cache_mode = force_generic_plan');
  queries = await exportedQueries();
});

afterAll(async () => {
  client?.release();
  await db?.drop();
});

/** The generic plan of `text`, executed with a dummy value per parameter; `enableSeqscan: false` asks whether an index can serve it. */
const plan = async (text: string, { enableSeqscan = true } = {}): Promise<string> => {
  await client.query('BEGIN');
  try {
    if (!enableSeqscan) await client.query('SET LOCAL enable_seqscan = off');
    await client.query(`PREPARE explained AS ${text}`);
    const { rows } = await client.query<{ types: string[] }>(`SELECT array(SELECT format_type(t, NULL) FROM unnest(parameter_types) AS t) AS types FROM pg_prepared_statements WHERE name = 'explained'`);
    const types = rows[0]!.types;
    // EXPLAIN takes no bind parameters: the values go in as typed literals.
    const args = types.length === 0 ? '' : `(${types.map((t) => `${client.escapeLiteral(dummyOf(t))}::${t}`).join(', ')})`;
    const explained = await client.query(`EXPLAIN EXECUTE explained${args}`);
    return explained.rows.map((r: Record<string, string>) => r['QUERY PLAN']).join('\n');
  } finally {
    await client.query('ROLLBACK');
    await client.query('DEALLOCATE ALL');
  }
};

/**
 * A distributed ledger's own statements (they call Citus's functions and read its metadata): run
 * on a cluster by test/citus/reads.citus.test.ts, not planned here.
 */
const distributedOnly = (q: Query): boolean => / DISTRIBUTED_\w+_SQL$/.test(q.name);

const textOf = (name: string): string => {
  const query = queries.find((q) => q.name === name);
  if (query === undefined) throw new Error(`no exported query ${name}`);
  return query.text;
};

describe('the exported read queries', () => {
  it('are found: at least the ones the ledger runs', () => {
    const names = queries.map((q) => q.name);
    for (const name of ['finished-jobs.ts: FINISHED_JOBS_SQL', 'job-stream.ts: JOB_STREAM_SQL', 'key-detail.ts: KEY_DETAIL_SQL', 'list-keys.ts: LIST_KEYS_SQL', 'workers.ts: LIST_WORKERS_SQL', 'replay-counts.ts: EVENT_COUNT_SQL']) {
      expect(names).toContain(name);
    }
  });

  it("each plans against the current schema (a distributed ledger's own statements apart: these)", async () => {
    expect(queries.filter(distributedOnly).map((q) => q.name).sort()).toEqual(['ledger-metrics.ts: DISTRIBUTED_LEDGER_METRICS_SQL', 'ledger-metrics.ts: DISTRIBUTED_LEDGER_SIZE_SQL']);
    for (const { name, text } of queries.filter((q) => !distributedOnly(q))) {
      const p = await plan(text).catch((error: Error) => {
        throw new Error(`${name}: ${error.message}`, { cause: error });
      });
      expect(p, name).toMatch(/\(cost=/);
    }
  });

  it('the lookups of jobs by id are served by the primary key of jl_jobs (seq scans off: what the index can do, not what a tiny table costs)', async () => {
    for (const name of ['finished-jobs.ts: FINISHED_JOBS_SQL', 'job-stream.ts: JOB_STREAM_SQL']) {
      const p = await plan(textOf(name), { enableSeqscan: false });
      expect(p, `${name}\n${p}`).toMatch(/(Bitmap )?Index (Only )?Scan (using|on) jl_jobs_pkey/);
      expect(p, `${name}\n${p}`).not.toMatch(/Seq Scan on jl_jobs/);
    }
  });

  it("the jobs listing, whose WHERE follows its filter, plans for every filter the API takes; one key's page walks jl_jobs_key_recent", async () => {
    const cursor = Buffer.from(JSON.stringify([0, 'job-1'])).toString('base64url');
    const filters: JobFilter[] = [{}, { key: 'k' }, { name: 'n' }, { queue: 'q' }, { status: 'dead' }, { status: 'failed' }, { key: 'k', status: 'dead', cursor, limit: 10 }, { key: 'k', name: 'n', queue: 'q', status: 'failed', cursor }];
    for (const filter of filters) {
      const { text, values } = listJobsQuery(filter);
      await client.query('BEGIN');
      try {
        await client.query('SET LOCAL enable_seqscan = off');
        const { rows } = await client.query(`EXPLAIN ${text}`, values);
        const p = rows.map((r: Record<string, string>) => r['QUERY PLAN']).join('\n');
        expect(p, JSON.stringify(filter)).toMatch(/\(cost=/);
        if (filter.key !== undefined) expect(p, `${JSON.stringify(filter)}\n${p}`).toMatch(/jl_jobs_key_recent/);
      } finally {
        await client.query('ROLLBACK');
      }
    }
  });
});

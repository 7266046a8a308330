// What a submission costs on a distributed ledger (Citus) beside one PostgreSQL, by the nodes it
// touches, and prints the figures (never asserts on them).
//
//   npm run bench:citus                       # JOBLEDGER_CITUS_URL, else the cluster of ../shared/citus
//   npm run bench:citus -- 300                # submissions per shape (default 200)
//
// One PostgreSQL is DATABASE_URL (else the machine's). On each, a scratch database, migrated (on
// the cluster: distributed), then one submission at a time, of each shape:
//   one key         enqueue on a key never seen: its stream's shard alone (one node: Citus
//                   commits it in one phase)
//   given job id    the same with a job id, whose uniqueness is checked on the id's own shard
//                   (unique_event_ids), which may sit on another node
//   two keys, 1 node / 2 nodes   enqueueMany of two jobs on two new keys whose streams sit on the
//                   same worker / on different workers: the second is a two-phase commit
// Two keys on two nodes against one key: a second node's statements and the two-phase commit.
// Two keys on one worker cost more than on two: Citus runs the second shard's statements on a
// second connection to that worker (it keeps one per worker between transactions,
// citus.max_cached_conns_per_worker, so the second is opened anew), and a transaction that wrote
// over two connections commits in two phases too.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { createLedger, type Ledger } from '../src/adapters/ledger.js';
import { keyStream } from '../src/domain/streams.js';
import { createCitusDatabase } from '../test/support/citus.js';
import { quantile, quiet, serverName, withScratchDatabase } from './scratch-database.js';

const RUNS = Number(process.argv[2] ?? 200);
const CITUS_URL = process.env.JOBLEDGER_CITUS_URL ?? 'postgres://postgres@127.0.0.1:5450/jl';

type Shape = 'one key' | 'given job id' | 'two keys, 1 node' | 'two keys, 2 nodes';
const SHAPES: readonly Shape[] = ['one key', 'given job id', 'two keys, 1 node', 'two keys, 2 nodes'];

/** Which worker holds `key`'s stream: a constant on one PostgreSQL. */
type NodeOf = (key: string) => Promise<string>;

const citusNodeOf =
  (pool: pg.Pool): NodeOf =>
  async (key) =>
    (
      await pool.query<{ node: string }>(
        `SELECT n.nodename || ':' || n.nodeport AS node
           FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid)
          WHERE p.shardid = get_shard_id_for_distribution_column('streams', $1::text)`,
        [keyStream(key)],
      )
    ).rows[0]!.node;

/** `count` fresh keys, and for the two-key shapes pairs of them on one node and on two. */
const freshKeys = async (nodeOf: NodeOf, prefix: string) => {
  const byNode = new Map<string, string[]>();
  let n = 0;
  const next = async () => {
    const key = `${prefix}/${n++}`;
    const node = await nodeOf(key);
    byNode.set(node, [...(byNode.get(node) ?? []), key]);
    return { key, node };
  };
  const take = async (same: boolean): Promise<[string, string]> => {
    const first = await next();
    for (;;) {
      const other = await next();
      if ((other.node === first.node) === same) return [first.key, other.key];
    }
  };
  return { one: async () => (await next()).key, sameNode: () => take(true), twoNodes: () => take(false) };
};

const measure = async (ledger: Ledger, nodeOf: NodeOf, distributed: boolean) => {
  const keys = await freshKeys(nodeOf, randomBytes(3).toString('hex'));
  const job = (key: string, jobId?: string) => ({ name: 'bench', key, limit: 1, queue: 'citus-bench', ...(jobId === undefined ? {} : { jobId }) });
  const submit: Record<Shape, () => Promise<() => Promise<unknown>>> = {
    'one key': async () => {
      const key = await keys.one();
      return () => ledger.enqueue(job(key));
    },
    'given job id': async () => {
      const key = await keys.one();
      return () => ledger.enqueue(job(key, `${key}-job`));
    },
    'two keys, 1 node': async () => {
      const [a, b] = await keys.sameNode();
      return () => ledger.enqueueMany([job(a), job(b)]);
    },
    'two keys, 2 nodes': async () => {
      // On one PostgreSQL every key is on "the" node: there is no second.
      const [a, b] = distributed ? await keys.twoNodes() : await keys.sameNode();
      return () => ledger.enqueueMany([job(a), job(b)]);
    },
  };
  const figures = new Map<Shape, number[]>();
  // Interleaved, so that a slow moment of the machine falls on every shape alike.
  for (let i = 0; i < RUNS; i++) {
    for (const shape of SHAPES) {
      const run = await submit[shape]();
      const start = performance.now();
      await run();
      figures.set(shape, [...(figures.get(shape) ?? []), performance.now() - start]);
    }
  }
  return new Map([...figures].map(([shape, ms]) => [shape, [...ms].sort((a, b) => a - b)]));
};

const on = async (url: string, distributed: boolean) => {
  const ledger = await createLedger({ databaseUrl: url, logger: quiet });
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  try {
    const nodeOf: NodeOf = distributed ? citusNodeOf(pool) : async () => 'one';
    // Warm: connections, plans, the queue's row.
    await ledger.enqueue({ name: 'bench', key: 'warm', limit: 1, queue: 'citus-bench' });
    return await measure(ledger, nodeOf, distributed);
  } finally {
    await pool.end();
    await ledger.close();
  }
};

const single = await withScratchDatabase('citus_single', (url) => on(url, false));
const previous = process.env.JOBLEDGER_CITUS_URL;
process.env.JOBLEDGER_CITUS_URL = CITUS_URL;
const cluster = await createCitusDatabase();
let distributed: Awaited<ReturnType<typeof on>>;
try {
  distributed = await on(cluster.url, true);
} finally {
  await cluster.drop();
  if (previous === undefined) delete process.env.JOBLEDGER_CITUS_URL;
}

const fmt = (ms: number) => ms.toFixed(1).padStart(7);
console.log(`submissions: ${RUNS} of each shape, one at a time; one PostgreSQL ${serverName}, Citus ${CITUS_URL.replace(/\/\/[^@]*@/, '//')}`);
console.log(`${'shape'.padEnd(20)} ${'single p50'.padStart(10)} ${'p99'.padStart(7)}   ${'citus p50'.padStart(9)} ${'p99'.padStart(7)}   ratio p50`);
for (const shape of SHAPES) {
  const [s, c] = [single.get(shape)!, distributed.get(shape)!];
  console.log(`${shape.padEnd(20)} ${fmt(quantile(s, 0.5)).padStart(10)} ${fmt(quantile(s, 0.99))}   ${fmt(quantile(c, 0.5)).padStart(9)} ${fmt(quantile(c, 0.99))}   ${(quantile(c, 0.5) / quantile(s, 0.5)).toFixed(1)}x`);
}
const second = quantile(distributed.get('two keys, 2 nodes')!, 0.5) - quantile(distributed.get('one key')!, 0.5);
console.log(`a second node and the two-phase commit (two keys on 2 nodes against one key, p50): +${second.toFixed(1)} ms`);

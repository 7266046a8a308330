import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as api from '../src/index.js';
import { createLedger, type Ledger } from '../src/adapters/ledger.js';
import { WORKER_DEFAULTS } from '../src/adapters/worker/defaults.js';
import { silentLogger } from '../src/domain/ports/logger.js';
import { keyStream } from '../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/database.js';
import { until } from './support/until.js';

// docs/guide.md's "Using it from code", run as written: its code blocks are read from the guide at
// test time (so the two cannot drift), written to a scratch folder and imported against a scratch
// database. Two substitutions, both below and nothing else: `from 'jobledger'` imports this
// repository's source, and the comment "// … on shutdown:" becomes a wait for the enqueued jobs
// to finish, so what the worker did can be checked.

const GUIDE = fileURLToPath(new URL('../docs/guide.md', import.meta.url));
const SOURCE = pathToFileURL(fileURLToPath(new URL('../src/index.ts', import.meta.url))).href;
const SHUTDOWN = '// … on shutdown:';

/** The text of docs/guide.md's section under `heading`, up to the next section; a missing guide or section fails, naming it. */
const section = async (heading: string): Promise<string> => {
  const guide = await readFile(GUIDE, 'utf8').catch(() => {
    throw new Error('docs/guide.md is missing: it holds the section "## Using it from code" this test runs');
  });
  const start = guide.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`docs/guide.md has no section "## ${heading}"`);
  const end = guide.indexOf('\n## ', start + 1);
  return guide.slice(start, end < 0 ? undefined : end);
};

/** The fenced code blocks of a text: their language and body. */
const codeBlocks = (text: string): { lang: string; code: string }[] =>
  [...text.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)].map((m) => ({ lang: m[1]!, code: m[2]! }));

/** Replaces `from` in `code` once, failing when it is not there exactly once (the guide changed: look again). */
const substitute = (code: string, from: string, to: string): string => {
  const at = code.split(from).length - 1;
  if (at !== 1) throw new Error(`expected ${JSON.stringify(from)} once in docs/guide.md's example, found it ${at} times`);
  return code.replace(from, () => to);
};

/** What the example's last step lets the test see before it shuts down. */
interface Hook {
  beforeShutdown(ledger: Ledger, worker: { workerId: string }): Promise<void>;
}

let db: MigratedDatabase;
let text: string;
let dir: string;
let workerId: string | undefined;

beforeAll(async () => {
  db = await createMigratedDatabase(4);
  text = await section('Using it from code');
  dir = await mkdtemp(join(tmpdir(), 'jobledger-readme-'));
});

afterAll(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  await db?.drop();
});

describe('docs/guide.md "Using it from code"', () => {
  it('runs as written: the jobs are enqueued under the keys and limits it says, the worker runs them, the ledger closes', async () => {
    const blocks = codeBlocks(text);
    const handlers = blocks.find((b) => b.code.startsWith('// handlers.mjs\n'));
    const main = blocks.find((b) => b !== handlers && b.code.includes("from './handlers.mjs'"));
    expect(handlers, 'a code block starting "// handlers.mjs"').toBeDefined();
    expect(main, "a code block importing './handlers.mjs'").toBeDefined();
    await writeFile(join(dir, 'handlers.mjs'), substitute(handlers!.code, "from 'jobledger'", `from '${SOURCE}'`));
    let program = substitute(main!.code, "from 'jobledger'", `from '${SOURCE}'`);
    program = substitute(program, SHUTDOWN, 'await globalThis.readmeExample.beforeShutdown(ledger, worker);');
    await writeFile(join(dir, `main.${main!.lang === 'ts' ? 'ts' : 'mjs'}`), program);

    const hook: Hook = {
      beforeShutdown: async (_ledger, worker) => {
        workerId = worker.workerId;
        await until(
          async () => (await db.pool.query<{ status: string }>('SELECT status FROM jl_jobs')).rows.map((r) => r.status),
          (s) => s.length === 2 && s.every((x) => x === 'completed'),
          "the example's two jobs to complete",
        );
      },
    };
    const g = globalThis as { readmeExample?: Hook };
    // The example's database, and its ledger's logger (the default, LOG_LEVEL) quiet in the test's output.
    const previous = { DATABASE_URL: process.env.DATABASE_URL, LOG_LEVEL: process.env.LOG_LEVEL };
    g.readmeExample = hook;
    Object.assign(process.env, { DATABASE_URL: db.url, LOG_LEVEL: 'warn' });
    try {
      await import(pathToFileURL(join(dir, `main.${main!.lang === 'ts' ? 'ts' : 'mjs'}`)).href);
    } finally {
      delete g.readmeExample;
      for (const [name, value] of Object.entries(previous)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
    expect(workerId).toBeDefined();

    const ledger = await createLedger({ pool: db.pool, migrate: false, logger: silentLogger });
    try {
      const { rows: jobs } = await db.pool.query(`SELECT name, key, status, attempts, max_attempts, lease_ms, args, worker_id FROM jl_jobs ORDER BY name`);
      expect(jobs).toEqual([
        { name: 'sendEmail', key: 'smtp', status: 'completed', attempts: 1, max_attempts: 5, lease_ms: 30_000, args: { to: 'a@example.com' }, worker_id: workerId },
        // "key tenant:42, limit 1", and the definition's lease and attempts
        { name: 'syncTenant', key: 'tenant:42', status: 'completed', attempts: 1, max_attempts: 10, lease_ms: 60_000, args: { tenantId: 42 }, worker_id: workerId },
      ]);
      const limitOf = async (key: string) => (await ledger.store.readStream(keyStream(key))).filter((e) => e.type === 'KeyLimitSet').map((e) => [e.data.limit, e.data.by ?? null]);
      expect(await limitOf('tenant:42')).toEqual([[1, null]]);
      expect(await limitOf('smtp')).toEqual([[5, null]]);
      // "and at most 4 syncs of any tenant at once": the sync held a slot of api:crm too
      expect(await limitOf('api:crm')).toEqual([[4, null]]);
      const { rows: syncs } = await db.pool.query<{ job_id: string }>(`SELECT job_id FROM jl_jobs WHERE name = 'syncTenant'`);
      const crm = await ledger.store.readStream(keyStream('api:crm'));
      expect(crm.filter((e) => e.type === 'LimitHeld' || e.type === 'LimitReleased').map((e) => [e.type, e.data.jobId])).toEqual([
        ['LimitHeld', syncs[0]!.job_id],
        ['LimitReleased', syncs[0]!.job_id],
      ]);
      // queues: { reports: { maxConcurrent: 3 } } is the limit of the reports queue's key, recorded by the configuration
      expect(await limitOf('queue:reports')).toEqual([[3, 'config']]);
      // Nothing left holding a slot: the worker stopped and the ledger closed cleanly.
      expect((await db.pool.query('SELECT 1 FROM jl_slots')).rowCount).toBe(0);
    } finally {
      await ledger.close();
    }
  });

  it("the worker options its comment names (\"also: …\") are the worker's options", () => {
    const [, named] = /ledger\.worker\(\{[^}]*\}\);\s*\/\/ also: ([^\n]+)/.exec(text) ?? [];
    expect(named, 'the "// also: …" comment after ledger.worker(…)').toBeDefined();
    const options = named!.split(',').map((o) => o.trim());
    expect(options.length).toBeGreaterThan(0);
    expect(options.filter((o) => !(o in WORKER_DEFAULTS))).toEqual([]);
  });

  it('the methods and exports it lists after the example exist', () => {
    const [, listed] = /The ledger also has ([^;]+);\s*`createHttpServer`/.exec(text) ?? [];
    expect(listed, 'the sentence "The ledger also has …; `createHttpServer` …"').toBeDefined();
    const methods = [...listed!.matchAll(/`(\w+)`/g)].map((m) => m[1]!);
    expect(methods.length).toBeGreaterThan(5);
    const ledgerMethods = api.Ledger.prototype as unknown as Record<string, unknown>;
    expect(methods.filter((m) => typeof ledgerMethods[m] !== 'function')).toEqual([]);
    expect(typeof api.createHttpServer).toBe('function');
  });

  it('the read side it names has the methods it lists, and the EventStoreDB entry exports what it imports', async () => {
    const [, listed] = /opens `LedgerReader\.open\(\{ databaseUrl \}\)`: the read\s+side alone \(([^)]+)\)/.exec(text) ?? [];
    expect(listed, 'the sentence "opens `LedgerReader.open({ databaseUrl })`: the read side alone (…)"').toBeDefined();
    const methods = [...listed!.matchAll(/`(\w+)`/g)].map((m) => m[1]!);
    expect(methods.length).toBeGreaterThan(5);
    const readerMethods = api.LedgerReader.prototype as unknown as Record<string, unknown>;
    expect(methods.filter((m) => typeof readerMethods[m] !== 'function')).toEqual([]);
    const [, named] = /import \{ (\w+) \} from 'jobledger\/eventstoredb'/.exec(text) ?? [];
    expect(named).toBe('EventStoreDbEventStore');
    const entry = (await import('../src/eventstoredb.js')) as Record<string, unknown>;
    expect(typeof entry[named!]).toBe('function');
  });
});

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Presence } from '../../src/adapters/worker/presence.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { noOutages } from '../../src/domain/ports/outages.js';
import { TOKEN, startTestServer, type TestServer } from './support.js';

// The page's polls (GET /api/keys, /api/workers, /api/queues, /api/keys/detail) answer with a weak
// ETag of what they depend on, and If-None-Match with 304 while nothing moved: not a write, not a
// heartbeat, not the clock passing a lease's expiry or the unstarted warning's threshold.

let now = Date.UTC(2026, 11, 1, 9);
let s: TestServer;
let presence: Presence;

interface Read {
  readonly status: number;
  readonly etag: string | null;
  readonly cacheControl: string | null;
  readonly text: string;
}

const read = async (path: string, query: Record<string, string> = {}, ifNoneMatch?: string): Promise<Read> => {
  const search = new URLSearchParams(query).toString();
  const response = await fetch(`${s.url}${path}${search === '' ? '' : `?${search}`}`, { headers: ifNoneMatch === undefined ? {} : { 'if-none-match': ifNoneMatch } });
  return { status: response.status, etag: response.headers.get('etag'), cacheControl: response.headers.get('cache-control'), text: await response.text() };
};

/**
 * The tag once two reads in a row give it: a transaction of another database that was running
 * when the first read looked (one older than this ledger's newest row, see LedgerVersion.pending)
 * may end before the second.
 */
const settled = async (path: string, query: Record<string, string> = {}): Promise<string> => {
  let last = (await read(path, query)).etag;
  for (let tries = 0; tries < 20; tries++) {
    const tag = (await read(path, query)).etag;
    if (tag === last && tag !== null) return tag;
    last = tag;
  }
  throw new Error(`the ETag of ${path} never settled`);
};

const ROUTES: readonly [string, Record<string, string>][] = [
  ['/api/keys', {}],
  ['/api/workers', {}],
  ['/api/queues', {}],
  ['/api/keys/detail', { key: 'k' }],
];

/**
 * Whether `path`'s tag outlives `change`: it settles, `change` runs, and If-None-Match with the
 * settled tag is a 304. A transaction of another database ending meanwhile (see settled) moves
 * the tag too, so a 200 is tried again, up to 5 times: a change that moves the tag fails every try.
 */
const outlives = async (path: string, query: Record<string, string>, change: () => Promise<unknown>): Promise<boolean> => {
  for (let tries = 0; tries < 5; tries++) {
    const tag = await settled(path, query);
    await change();
    if ((await read(path, query, tag)).status === 304) return true;
  }
  return false;
};

/** What a heartbeat writes (src/adapters/worker/presence.ts, BEAT_SQL), at once. */
const heartbeat = (id: string) => s.db.pool.query('UPDATE workers SET last_seen = statement_timestamp() WHERE id = $1', [id]);

beforeAll(async () => {
  s = await startTestServer({ clock: () => now });
  await s.ledger.enqueue({ name: 'work', key: 'k', limit: 1, queue: 'q', leaseMs: 10_000, jobId: 'k-1' });
  await s.ledger.enqueue({ name: 'work', key: 'k', queue: 'q', jobId: 'k-2' });
  // A live worker on another queue: it beats, but consumes nothing of q.
  presence = new Presence(s.db.pool, noOutages, silentLogger, { id: 'w-live', queue: 'elsewhere', concurrency: 1, intervalMs: 60_000 }, () => 0);
  await presence.start();
});

afterAll(async () => {
  await presence?.stop();
  await s?.close();
});

describe('ETag and 304', () => {
  it.each(ROUTES)('%s %j: a weak ETag, no-store; If-None-Match with it is a 304 with no body, the tag again', async (path, query) => {
    const first = await read(path, query);
    expect(first.status).toBe(200);
    expect(first.etag).toMatch(/^W\/"[\w-]{27}"$/);
    expect(first.cacheControl).toBe('no-store');
    const tag = await settled(path, query);
    const again = await read(path, query, tag);
    expect(again).toEqual({ status: 304, etag: tag, cacheControl: 'no-store', text: '' });
    // One of several tags, and the strong form of a weak one, match too (the weak comparison).
    expect((await read(path, query, `W/"other", ${tag}`)).status).toBe(304);
    expect((await read(path, query, tag.slice(2))).status).toBe(304);
    expect((await read(path, query, 'W/"other"')).status).toBe(200);
  });

  it("a page's tag is its own: another order, filter or page answers 200 to it", async () => {
    const tag = await settled('/api/keys');
    const others: Record<string, string>[] = [{ sort: 'key' }, { limit: '10' }, { offset: '1' }, { match: 'k' }, { atLimit: 'true' }];
    for (const query of others) {
      expect((await read('/api/keys', query, tag)).status, JSON.stringify(query)).toBe(200);
    }
    // The same page asked with its defaults spelt out is the same page.
    expect((await read('/api/keys', { sort: 'attention', dir: 'asc', limit: '50', offset: '0' }, tag)).status).toBe(304);
  });

  it('one read answers every request under a tag, each with its own now: pages polling an unchanged ledger read it once', async () => {
    for (const [path, query, method] of [['/api/keys', {}, 'keyPage'], ['/api/keys/detail', { key: 'k' }, 'keyDetail']] as const) {
      const tag = await settled(path, query);
      const reads = vi.spyOn(s.ledger, method);
      try {
        now += 1;
        const answers = await Promise.all(Array.from({ length: 5 }, () => read(path, query)));
        now += 1;
        const later = await read(path, query);
        const all = [...answers, later];
        // A transaction of another database may move the tag meanwhile (see settled): one read for each tag that is new, none for the settled one.
        const fresh = new Set(all.map((a) => a.etag).filter((t) => t !== tag)).size;
        expect(reads.mock.calls.length, path).toBeLessThanOrEqual(fresh);
        const under = all.filter((a) => a.etag === tag).map((a) => JSON.parse(a.text) as { now: number });
        expect(under.length, path).toBeGreaterThan(1);
        const withoutNow = ({ now: _, ...rest }: { now: number }) => rest;
        for (const body of under) expect(withoutNow(body), path).toEqual(withoutNow(under[0]!));
        expect(JSON.parse(later.text).now, path).toBe(now);
        // Moved: read again, once for every request under the new tag.
        await s.ledger.enqueue({ name: 'work', key: 'k', queue: 'q', jobId: `shared-${method}` });
        const moved = await Promise.all(Array.from({ length: 3 }, () => read(path, query)));
        expect(moved[0]!.etag, path).not.toBe(tag);
        expect(reads.mock.calls.length, path).toBeGreaterThan(0);
        expect(reads.mock.calls.length, path).toBeLessThanOrEqual(fresh + new Set(moved.map((m) => m.etag)).size);
      } finally {
        reads.mockRestore();
      }
    }
  });

  it('an enqueue changes every tag that depends on the ledger: the next poll is a 200 with the change', async () => {
    const tags = await Promise.all(ROUTES.map(([path, query]) => settled(path, query)));
    await s.ledger.enqueue({ name: 'work', key: 'k', queue: 'q', jobId: 'k-3' });
    for (const [i, [path, query]] of ROUTES.entries()) {
      const after = await read(path, query, tags[i]);
      expect(after.status, path).toBe(200);
      expect(after.etag, path).not.toBe(tags[i]);
    }
    expect(JSON.parse((await read('/api/keys/detail', { key: 'k' })).text).parked.map((p: { jobId: string }) => p.jobId)).toEqual(['k-2', 'shared-keyPage', 'shared-keyDetail', 'k-3']);
  });

  it("a transaction of another database, begun before the ledger's newest row and ended after the tag was read, leaves the tags alone", async () => {
    const other = new URL(s.db.url);
    other.pathname = '/postgres';
    const elsewhere = new pg.Client({ connectionString: other.toString() });
    await elsewhere.connect();
    try {
      await elsewhere.query('BEGIN');
      await elsewhere.query('SELECT pg_current_xact_id()');
      // Its id is below the newest row's, and it is running: on this server it could be one of ours.
      await s.ledger.enqueue({ name: 'work', key: 'k', queue: 'q', jobId: 'after-elsewhere' });
      const tags = await Promise.all(ROUTES.map(([path, query]) => settled(path, query)));
      await elsewhere.query('COMMIT');
      for (const [i, [path, query]] of ROUTES.entries()) expect((await read(path, query, tags[i])).status, path).toBe(304);
    } finally {
      await elsewhere.end();
    }
  });

  it("a heartbeat changes /api/workers' tag (its lastSeen is in the answer), and not /api/keys' (the worker was live and stays so)", async () => {
    const workers = await settled('/api/workers');
    await heartbeat('w-live');
    expect((await read('/api/workers', {}, workers)).status).toBe(200);
    expect(await outlives('/api/keys', {}, () => heartbeat('w-live'))).toBe(true);
  });

  it('a worker going gone, with nothing written, changes the tags of what its liveness decides: holder states, consumers, workers', async () => {
    await s.start('k', 'k-1', 'w-live');
    const tags = await Promise.all(ROUTES.map(([path, query]) => settled(path, query)));
    // Silent for longer than 3 of its heartbeats, as a killed worker is: nothing is written by anyone.
    await s.db.pool.query("UPDATE workers SET last_seen = statement_timestamp() - interval '10 minutes' WHERE id = 'w-live'");
    const tagsAfter = await Promise.all(ROUTES.map(([path, query]) => settled(path, query)));
    for (const [i, [path]] of ROUTES.entries()) expect(tagsAfter[i], path).not.toBe(tags[i]);
    expect(JSON.parse((await read('/api/keys/detail', { key: 'k' })).text).holders[0]).toMatchObject({ jobId: 'k-1', state: 'worker-gone' });
  });

  it("the clock passing a lease's expiry changes the tags that show it, with nothing written", async () => {
    const [keys, detail] = [await settled('/api/keys'), await settled('/api/keys/detail', { key: 'k' })];
    now += 11_000;
    expect((await read('/api/keys', {}, keys)).status).toBe(200);
    expect((await read('/api/keys/detail', { key: 'k' }, detail)).status).toBe(200);
    expect(JSON.parse((await read('/api/keys/detail', { key: 'k' })).text).holders[0]).toMatchObject({ jobId: 'k-1', state: 'expired' });
  });

  it("the clock passing the unstarted warning's threshold changes /api/keys' tag, with nothing written; then it holds again", async () => {
    await s.ledger.enqueue({ name: 'work', key: 'fresh', limit: 1, queue: 'q' });
    const tag = await settled('/api/keys');
    now += 31_000;
    const after = await read('/api/keys', {}, tag);
    expect(after.status).toBe(200);
    expect(JSON.parse(after.text).warnings.find((w: { kind: string }) => w.kind === 'holders-unstarted')).toMatchObject({ count: 1, keys: [{ key: 'fresh' }] });
    expect(
      await outlives('/api/keys', {}, async () => {
        now += 5_000;
      }),
    ).toBe(true);
  });

  it('a refused read (400, 404) answers no ETag and no 304, whatever If-None-Match says', async () => {
    const tag = await settled('/api/keys/detail', { key: 'k' });
    expect(await read('/api/keys/detail', { key: 'nobody' }, tag)).toMatchObject({ status: 404, etag: null });
    expect(await read('/api/keys', { limit: '0' }, '*')).toMatchObject({ status: 400, etag: null });
    // A write is never conditional.
    const release = await fetch(`${s.url}/api/keys/release`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}`, 'if-none-match': '*' }, body: JSON.stringify({ key: 'k', jobId: 'k-1', force: true }) });
    expect(release.status).toBe(200);
  });
});

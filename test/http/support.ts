import { existsSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { FastifyInstance } from 'fastify';
import * as E from 'fp-ts/lib/Either.js';
import type { Browser, Page } from 'playwright-core';
import { expect } from 'vitest';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import type { AccessToken } from '../../src/adapters/http/auth.js';
import { createHttpServer, type HttpServerOptions } from '../../src/adapters/http/server.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';

// The HTTP server in-process on a free port, over a real ledger on a fresh database.

export const TOKEN = 'test-token-\u00e9';

export interface TestServer {
  readonly url: string;
  readonly ledger: Ledger;
  readonly db: MigratedDatabase;
  readonly app: FastifyInstance;
  /** GET `path` (with a query built from `query`, every value encoded); the parsed JSON body. */
  get(path: string, query?: Record<string, string>): Promise<{ status: number; body: any }>;
  /** POST JSON; `token` null sends no Authorization header. */
  post(path: string, body: unknown, token?: string | null): Promise<{ status: number; body: any }>;
  /** Events in the ledger: a refused request must not change it. */
  eventCount(): Promise<number>;
  /** Sends a request the server must refuse: asserts the status, the field its JSON error names, and that no event was written; returns the body. */
  refused(request: () => Promise<{ status: number; body: any }>, status: number, field?: string): Promise<any>;
  /** Starts the job holding a slot of `key` under its lease, as a worker would (JobStarted). */
  start(key: string, jobId: string, workerId?: string): Promise<void>;
  /** The job's worker says its handler stopped (Stopped), as it does once a release or a cancel revoked the lease of a running job. */
  stopped(key: string, jobId: string): Promise<void>;
  close(): Promise<void>;
}

/** How the test server is bound: `host` (default 127.0.0.1) and the access options that go with it (see createHttpServer). */
export type TestServerAccess = Pick<HttpServerOptions, 'host' | 'publicReads' | 'allowedHosts'>;

export const startTestServer = async (
  options: {
    bodyLimit?: number;
    inlineProjections?: boolean;
    sweepIntervalMs?: number;
    tokens?: readonly AccessToken[];
    /** The ledger's clock (default Date.now): event times and lease expiries. */
    clock?: () => number;
    /** HttpServerOptions.answersFreshMs (default 0, the server's: every poll reads what it depends on). */
    answersFreshMs?: number;
  } & TestServerAccess = {},
): Promise<TestServer> => {
  const db = await createMigratedDatabase(10, { pipeline: true });
  const ledger = await createLedger({
    pool: db.pool,
    migrate: false,
    logger: silentLogger,
    ...(options.inlineProjections === false ? { inlineProjections: false } : {}),
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.sweepIntervalMs === undefined ? {} : { sweepIntervalMs: options.sweepIntervalMs }),
  });
  const { bodyLimit, tokens, host = '127.0.0.1', publicReads, allowedHosts, answersFreshMs } = options;
  const app = await createHttpServer({
    ledger,
    token: TOKEN,
    host,
    ...(publicReads ? { publicReads } : {}),
    ...(allowedHosts ? { allowedHosts } : {}),
    ...(bodyLimit ? { bodyLimit } : {}),
    ...(tokens ? { tokens } : {}),
    ...(answersFreshMs === undefined ? {} : { answersFreshMs }),
  });
  await app.listen({ port: 0, host });
  const { port } = app.server.address() as AddressInfo;
  // A wildcard bind is reached at one of the machine's addresses (the Host check answers to them).
  const url = `http://${host === '0.0.0.0' ? reachableAddress() : host}:${port}`;
  const eventCount = async () => (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;
  const json = async (response: Response) => ({ status: response.status, body: await response.json() });
  return {
    url,
    ledger,
    db,
    app,
    get: async (path, query) => json(await fetch(`${url}${path}${query ? `?${new URLSearchParams(query)}` : ''}`)),
    post: async (path, body, token = TOKEN) =>
      json(
        await fetch(`${url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(token === null ? {} : { authorization: `Bearer ${token}` }) },
          body: JSON.stringify(body),
        }),
      ),
    eventCount,
    refused: async (request, status, field) => {
      const before = await eventCount();
      const response = await request();
      expect(response.status).toBe(status);
      expect(typeof response.body.error).toBe('string');
      if (field !== undefined) expect(response.body).toMatchObject({ field, error: expect.stringContaining(field) });
      expect(await eventCount()).toBe(before);
      return response.body;
    },
    start: async (key, jobId, workerId = 'worker-1') => {
      const holder = (await ledger.keyDetail(key))?.holders.find((h) => h.jobId === jobId);
      if (!holder) throw new Error(`${jobId} holds no slot of ${key}`);
      const result = await ledger.execute(keyStream(key), { type: 'Start', jobId, leaseId: holder.leaseId, workerId });
      if (E.isLeft(result)) throw new Error(`Start ${jobId} refused: ${result.left.tag}`);
    },
    stopped: async (key, jobId) => {
      const leaseId = (await ledger.keyState(key)).state.jobs[jobId]?.lease?.leaseId;
      if (leaseId === undefined) throw new Error(`${jobId} holds no slot of ${key}`);
      const result = await ledger.execute(keyStream(key), { type: 'Stopped', jobId, leaseId, jitter: 0 });
      if (E.isLeft(result)) throw new Error(`Stopped ${jobId} refused: ${result.left.tag}`);
    },
    close: async () => {
      await app.close();
      await ledger.close();
      await db.drop();
    },
  };
};

/** This machine's first IPv4 address off loopback, else 127.0.0.1 (a machine with loopback alone). */
export const reachableAddress = (): string =>
  Object.values(networkInterfaces())
    .flatMap((addresses) => addresses ?? [])
    .find((a) => a.family === 'IPv4' && !a.internal)?.address ?? '127.0.0.1';

/** Keys the API must carry as query and body parameters, never path segments. */
export const AWKWARD_KEYS = ['tenant/acme/eu', 'with spaces and ? & = #', 'ключ:日本語:🔑', '<img src=x onerror=alert(1)>', '../..%2F'] as const;

// ---- the dashboard in a browser --------------------------------------------------

/** Debian's Chromium, driven by playwright-core; without it (a developer machine) browser tests skip, and say so. */
export const CHROMIUM = '/usr/bin/chromium';
export const hasChromium = existsSync(CHROMIUM);
export const SKIP_NO_CHROMIUM = `SKIPPED: no Chromium at ${CHROMIUM}; install Debian's package (apt-get install -y chromium) to run the dashboard browser test`;

/** Headless Chromium; playwright-core is imported here, on first use, so API tests never load it. */
export const launchChromium = async (): Promise<Browser> =>
  (await import('playwright-core')).chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });

/** Records what a dashboard test expects none of: script errors, console errors, native dialogs (an alert() would mean markup ran). */
export const watchProblems = (page: Page, problems: string[]): void => {
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') problems.push(`console error: ${message.text()}`);
  });
  page.on('dialog', (dialog) => {
    problems.push(`native dialog: ${dialog.message()}`);
    void dialog.dismiss();
  });
};

/** Gives the tab the token (the shared one unless another is given, a named one say), as the token dialog would keep it (sessionStorage, key jobledger.token): actions ask no more. */
export const rememberToken = (page: Page, token: string = TOKEN): Promise<void> => page.evaluate<void>(`sessionStorage.setItem('jobledger.token', ${JSON.stringify(token)})`);

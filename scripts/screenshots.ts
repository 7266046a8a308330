import { mkdirSync, statSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { chromium } from 'playwright-core';
import { withScratchDatabase } from '../bench/scratch-database.js';
import { createHttpServer } from '../src/adapters/http/server.js';
import { createLedger, type Ledger } from '../src/adapters/ledger.js';
import type { JobContext } from '../src/adapters/worker/define-job.js';
import { silentLogger } from '../src/domain/ports/logger.js';

// `npm run docs:screenshots`: docs/images/page-<lang>.png, the dashboard in each of its languages,
// over a ledger as one looks in use: keys at their limit with running holders and parked jobs
// (first, by the page's default sort), idle keys with a history, a paused key, a scheduled job, a
// dead job, a live worker. Made on a scratch database of DATABASE_URL's server (else the machine's
// PostgreSQL), dropped after; Chromium is Debian's (/usr/bin/chromium, or CHROMIUM).

const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const OUT = new URL('../../docs/images/', import.meta.url);
const VIEWPORT = { width: 1280, height: 900 };
// The page's own catalogue (a browser module, copied beside tsc's output by the build).
const { LANGUAGES } = (await import(new URL('../src/adapters/http/page/i18n.js', import.meta.url).href)) as { LANGUAGES: Record<string, string> };

/** Runs until its lease is taken or the worker shuts down: a holder that stays running while the pictures are taken. */
const hold = (_args: unknown, ctx: JobContext): Promise<void> =>
  new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error)));

const until = async (what: string, ok: () => Promise<boolean>): Promise<void> => {
  for (const end = Date.now() + 30_000; Date.now() < end; await new Promise((r) => setTimeout(r, 100))) if (await ok()) return;
  throw new Error(`timed out waiting for ${what}`);
};

/** The ledger the pictures show. */
const populate = async (ledger: Ledger): Promise<() => Promise<void>> => {
  const worker = ledger.worker({
    concurrency: 12,
    handlers: {
      // Done at once: the idle keys' history.
      resizeImage: async () => undefined,
      sendDigest: async () => undefined,
      deliverWebhook: async () => {
        throw new Error('HTTP 502 from shop.example.com');
      },
      syncTenant: hold,
      chargeCard: hold,
      sendEmail: hold,
      importCatalog: hold,
    },
  });
  worker.start();
  const ran = async (n: number) => (await ledger.jobs({ status: 'completed', limit: 100 })).jobs.length + (await ledger.jobs({ status: 'dead', limit: 100 })).jobs.length >= n;

  // Idle keys, their jobs done; a webhook that fails for good.
  const done = [
    ...[1, 2, 3, 4, 5, 6].map((i) => ({ name: 'resizeImage', key: 'images:thumbnails', limit: 8, jobId: `img-${3100 + i}` })),
    ...[1, 2, 3].map((i) => ({ name: 'sendDigest', key: 'tenant:umbrella', limit: 4, jobId: `digest-${880 + i}` })),
    ...[1, 2].map((i) => ({ name: 'resizeImage', key: 'webhooks:github', limit: 5, jobId: `gh-${40 + i}` })),
    { name: 'deliverWebhook', key: 'webhooks:shopify', limit: 2, jobId: 'shopify-order-5521', maxAttempts: 1 },
  ];
  for (const job of done) await ledger.enqueue(job);
  await until('the idle keys to finish their jobs', () => ran(done.length));

  // Keys at their limit: holders running, the rest parked in line.
  const busy = [
    ['smtp:eu', 'sendEmail', 3, 12, 'mail'],
    ['api:stripe', 'chargeCard', 1, 7, 'charge'],
    ['tenant:acme', 'syncTenant', 2, 6, 'acme-sync'],
    ['tenant:globex', 'syncTenant', 1, 3, 'globex-sync'],
  ] as const;
  let running = 0;
  for (const [key, name, limit, jobs, id] of busy) {
    for (let i = 1; i <= jobs; i++) await ledger.enqueue({ name, key, limit, jobId: `${id}-${100 + i}`, args: { n: i } });
    running += limit;
  }
  // A key paused by an operator, one holder still running, its arrivals parked.
  await ledger.enqueue({ name: 'importCatalog', key: 'tenant:initech', limit: 2, jobId: 'initech-import-1' });
  // A key in use with room to spare.
  await ledger.enqueue({ name: 'importCatalog', key: 'exports:csv', limit: 4, jobId: 'export-77' });
  running += 2;
  await until('the holders to start', async () => (await ledger.jobs({ status: 'running', limit: 100 })).jobs.length === running);
  await ledger.pause({ key: 'tenant:initech', by: 'ops', reason: 'their database is being migrated' });
  for (const i of [2, 3, 4]) await ledger.enqueue({ name: 'importCatalog', key: 'tenant:initech', jobId: `initech-import-${i}` });
  // Idle keys with something ahead: a report due in an hour, a key with room.
  await ledger.enqueue({ name: 'sendDigest', key: 'reports:daily', limit: 1, jobId: 'report-2026-12-06', delayMs: 3_600_000 });
  await ledger.enqueue({ name: 'sendDigest', key: 'reports:weekly', limit: 1, jobId: 'report-w49', delayMs: 86_400_000 });
  return () => worker.stop(0);
};

const main = async (): Promise<void> => {
  await withScratchDatabase('screenshots', async (databaseUrl) => {
    const ledger = await createLedger({ databaseUrl, logger: silentLogger });
    const app = await createHttpServer({ ledger, token: 'screenshots' });
    let stop: (() => Promise<void>) | undefined;
    const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'] });
    try {
      stop = await populate(ledger);
      await app.listen({ port: 0, host: '127.0.0.1' });
      const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/`;
      mkdirSync(OUT, { recursive: true });
      for (const lang of Object.keys(LANGUAGES)) {
        // The page speaks the browser's language (navigator.languages) until one is picked.
        const context = await browser.newContext({ locale: lang, viewport: VIEWPORT, deviceScaleFactor: 1 });
        const page = await context.newPage();
        await page.goto(url);
        // Locators, not waitForFunction: the page's CSP forbids the eval that needs.
        await page.locator('#keys-body tr').nth(11).waitFor();
        await page.locator('#workers-body tr').first().waitFor();
        // Past the first paint of every section (the workers', the failed jobs').
        await page.waitForTimeout(1_500);
        const file = new URL(`page-${lang}.png`, OUT);
        await page.screenshot({ path: file.pathname });
        console.log(`wrote ${file.pathname} (${Math.round(statSync(file).size / 1024)} KB)`);
        await context.close();
      }
    } finally {
      await browser.close();
      await stop?.();
      await app.close();
      await ledger.close();
    }
  });
};

await main();

import { mkdirSync } from 'node:fs';
import { hostname } from 'node:os';
import * as E from 'fp-ts/lib/Either.js';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Worker } from '../../src/adapters/worker/worker.js';
import { keyStream } from '../../src/domain/streams.js';
import { hasChromium, launchChromium, SKIP_NO_CHROMIUM, startTestServer, watchProblems, type TestServer } from './support.js';

// The language picker in real headless Chromium (Debian's package): in each language no English
// text of the page's own is left visible — every text node, placeholder, aria-label and title is
// compared with the English catalogue, the ledger's data (keys, job ids, workers, names, errors)
// taken out — on the overview (cards, warnings, keys, workers, queues, failed and dead jobs), a
// key's view, a parked and a dead job's views and a confirmation; dates are not the browser's
// locale's, and the choice survives a reload.

if (!hasChromium) console.warn(`\n*** ${SKIP_NO_CHROMIUM} ***\n`);

const ARTIFACTS = new URL('../../test-artifacts/', import.meta.url);

type Value = string | Record<string, string>;
const { CATALOGUE } = (await import(new URL('../../src/adapters/http/page/i18n.js', import.meta.url).href)) as { CATALOGUE: Record<string, Record<string, Value>> };

// A dead job's reason, as JobDead records it in the ledger.
const DEAD_REASON = 'failed; no attempt left (1/1)';

let s: TestServer;
let browser: Browser;
let worker: Worker;
const problems: string[] = [];

// Everything the ledger holds that the page shows as data, longest first (a key contains a shorter one).
const data = () =>
  [
    'shop/orders', 'order-1', 'order-2', 'order-3', 'order-4', 'order-5', 'later-1', 'worker-a', 'charge', 'api', 'ops', 'mail-1', 'mail-2', 'smtp 550', DEAD_REASON,
    worker.workerId, hostname(), 'idle', 'default', 'JOBLEDGER_TOKENS', 'JOBLEDGER_TOKEN', 'jobledger serve', 'jobledger', 'http',
  ].sort((a, b) => b.length - a.length);

/** Runs `jobId` of `key` once and fails it, as a worker would: dead with maxAttempts 1, else waiting for its retry. */
const failOnce = async (key: string, jobId: string, maxAttempts: number) => {
  await s.ledger.enqueue({ name: 'charge', key, jobId, maxAttempts });
  await s.start(key, jobId, 'worker-a');
  const leaseId = (await s.ledger.keyState(key)).state.jobs[jobId]!.lease!.leaseId;
  const failed = await s.ledger.execute(keyStream(key), { type: 'Fail', jobId, leaseId, error: 'smtp 550', jitter: 0 });
  if (E.isLeft(failed)) throw new Error(failed.left.tag);
};

beforeAll(async () => {
  if (!hasChromium) return;
  s = await startTestServer();
  await s.ledger.enqueueMany([
    { name: 'charge', key: 'shop/orders', limit: 2, jobId: 'order-1' },
    { name: 'charge', key: 'shop/orders', jobId: 'order-2' },
    { name: 'charge', key: 'shop/orders', jobId: 'order-3' },
    { name: 'charge', key: 'shop/orders', jobId: 'order-4' },
    { name: 'charge', key: 'shop/orders', jobId: 'order-5' },
    { name: 'charge', key: 'shop/orders', jobId: 'later-1', delayMs: 3_600_000 },
    { name: 'charge', key: 'api', limit: 1, jobId: 'api-1' },
  ]);
  await s.start('shop/orders', 'order-1', 'worker-a');
  // A revoked handoff (by ops), a paused key: their words in the timeline, the badge and the banner.
  await s.ledger.release({ key: 'shop/orders', jobId: 'order-2', by: 'ops' });
  await s.ledger.pause({ key: 'api', by: 'ops' });
  // A dead job and one waiting for its retry; worker-a, which started them, long gone; a live worker on a queue of its own.
  await failOnce('mail', 'mail-1', 1);
  await failOnce('mail', 'mail-2', 3);
  await s.db.pool.query(
    `INSERT INTO workers (id, host, pid, queue, concurrency, heartbeat_ms, started_at, last_seen, running) VALUES ('worker-a', $1, 4242, 'default', 2, 5000, now() - interval '1 hour', now() - interval '10 minutes', 1)`,
    [hostname()],
  );
  worker = s.ledger.worker({ queue: 'idle', presenceIntervalMs: 1_000, handlers: {} });
  worker.start();
  browser = await launchChromium();
  mkdirSync(ARTIFACTS, { recursive: true });
});

afterAll(async () => {
  await worker?.stop();
  await browser?.close();
  await s?.close();
});

/** A tab whose browser speaks `locale` (navigator.languages), its problems recorded. */
const open = async (locale: string, hash = ''): Promise<Page> => {
  const context = await browser.newContext({ locale, viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  watchProblems(page, problems);
  await page.goto(`${s.url}/${hash}`);
  return page;
};

// Runs in the page (a string: this project's TypeScript has no DOM types): every visible text,
// and the attributes a reader meets (placeholder, aria-label, title, a phone's cell label).
const VISIBLE_TEXT = `(() => {
  const out = [document.title];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.textContent.trim();
    if (text !== '' && node.parentElement.checkVisibility()) out.push(text);
  }
  for (const element of document.querySelectorAll('[placeholder], [aria-label], [title], [data-label]')) {
    if (!element.checkVisibility()) continue;
    for (const name of ['placeholder', 'aria-label', 'title', 'data-label']) if (element.hasAttribute(name)) out.push(element.getAttribute(name));
  }
  return out;
})()`;

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

const asWord = (piece: string) => new RegExp(`(?<!\\p{L})${escape(piece)}(?!\\p{L})`, 'u');

/**
 * The English strings a page in `lang` must not show: each literal piece of an English string
 * (between its placeholders) that the language does not use itself anywhere (Dutch "in", a
 * "Token" shared by all).
 */
const englishPieces = (lang: string) => {
  const own = JSON.stringify(CATALOGUE[lang]);
  return Object.entries(CATALOGUE.en!).flatMap(([key, value]) =>
    (typeof value === 'string' ? [value] : Object.values(value))
      .flatMap((form) => form.split(/\{\w+\}/))
      .map((piece) => piece.trim().replace(/^[\s,.;:()·–—]+|[\s,.;:()·–—]+$/g, ''))
      .filter((piece) => /\p{L}{2}/u.test(piece) && !asWord(piece).test(own))
      .map((piece) => ({ key, piece, pattern: asWord(piece) })),
  );
};

/** What `page` shows in English although its language is `lang`; also a catalogue key shown raw, a missing value, and a date in English. */
const englishLeft = async (page: Page, lang: string): Promise<string[]> => {
  const pieces = englishPieces(lang);
  const texts = (await page.evaluate<string[]>(VISIBLE_TEXT)).map((text) => data().reduce((rest, piece) => rest.split(piece).join(' '), text));
  return texts.flatMap((text) => [
    ...pieces.filter((p) => p.pattern.test(text)).map((p) => `${p.key} "${p.piece}" in: ${text}`),
    ...(/^[a-z]+\.[a-zA-Z-]+$/.test(text.trim()) ? [`a catalogue key shown raw: ${text}`] : []),
    ...(/\b(null|undefined|NaN)\b/.test(text) ? [`a value missing: ${text}`] : []),
    ...(/\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\b|\b[AP]M\b/.test(text) ? [`an English date: ${text}`] : []),
  ]);
};

const pick = async (page: Page, lang: string) => {
  await page.selectOption('#language', lang);
  await expect.poll(() => page.evaluate<string>('document.documentElement.lang')).toBe(lang);
};

describe('the dashboard in four languages, in headless Chromium', () => {
  it('the English page, in a browser speaking no language of ours, is English, with no key of the catalogue shown raw', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open('de-DE', `#key=${encodeURIComponent('shop/orders')}`);
    await expect.poll(() => page.locator('#handoffs li').count()).toBe(3);
    expect(await page.evaluate<string>('document.documentElement.lang')).toBe('en');
    expect(await page.inputValue('#language')).toBe('en');
    const texts = await page.evaluate<string[]>(VISIBLE_TEXT);
    expect(texts.filter((text) => /^[a-z]+\.[a-zA-Z-]+$/.test(text))).toEqual([]);
    expect(texts).toContain('Holders');
    // The check below finds English where there is some.
    expect((await englishLeft(page, 'nl')).length).toBeGreaterThan(20);
    await page.context().close();
    expect(problems).toEqual([]);
  });

  it.each(['nl', 'pt', 'sv'])('%s: picked in the header, no English is left on the overview, the key view, the job views or a confirmation, and a reload keeps it', async (lang) => {
    if (!hasChromium) return;
    const page = await open('en-US', `#key=${encodeURIComponent('shop/orders')}`);
    await expect.poll(() => page.locator('#handoffs li').count()).toBe(3);
    await pick(page, lang);
    // The cards and the warnings; the key view: a holder started (its worker gone), one
    // unstarted, parked and scheduled jobs, a revoked handoff; the keys table below it, with a
    // paused key; the workers (one live, one gone) and the queues; a dead and a failed job.
    await expect.poll(() => page.locator('#parked-body tr').count()).toBe(3);
    expect(await page.locator('#keys-body .paused-badge').count()).toBe(1);
    await expect.poll(() => page.locator('#workers-body tr').count()).toBe(2);
    expect(await page.locator('#dead-body tr').count()).toBe(2);
    expect(await page.locator('#warnings-list li').count()).toBeGreaterThan(0);
    expect(await englishLeft(page, lang)).toEqual([]);

    // A parked job's view (its place, the holders ahead), then a dead one's (its end, its events).
    await page.locator('#parked-body tr[data-job="order-4"] a.job-link').click();
    await expect.poll(() => page.locator('#job-limits > li').count()).toBe(1);
    expect(await englishLeft(page, lang)).toEqual([]);
    await page.locator('#dead-body tr[data-job="mail-1"] a.job-link').click();
    await expect.poll(() => page.locator('#job-events li[data-type="JobDead"]').count()).toBe(1);
    expect(await englishLeft(page, lang)).toEqual([]);
    // Why a job is scheduled, in words of the language: a retry after a failed attempt, a later start.
    await page.locator('#dead-body tr[data-job="mail-2"] a.job-link').click();
    await expect.poll(() => page.locator('#job-waits li.wait-scheduled').count()).toBe(1);
    expect(await page.locator('#job-standing').textContent()).toContain('smtp 550');
    expect(await englishLeft(page, lang)).toEqual([]);
    await page.goto(`${s.url}/#job=later-1`);
    await expect.poll(() => page.locator('#job-waits li.wait-scheduled').count()).toBe(1);
    expect(await englishLeft(page, lang)).toEqual([]);

    // Retrying the dead job asks first, then cancelled.
    await page.locator('#dead-body tr[data-job="mail-1"] input.pick').check();
    await page.locator('#dead-retry').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await englishLeft(page, lang)).toEqual([]);
    await page.locator('#confirm-cancel').click();
    await page.locator('#confirm[open]').waitFor({ state: 'detached' });
    await page.goto(`${s.url}/#key=${encodeURIComponent('shop/orders')}`);
    await expect.poll(() => page.locator('#parked-body tr').count()).toBe(3);

    // A count-aware confirmation, then cancelled.
    await page.locator('#discard-all').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await englishLeft(page, lang)).toEqual([]);
    await page.screenshot({ path: new URL(`page-${lang}.png`, ARTIFACTS).pathname, fullPage: true });
    await page.locator('#confirm-cancel').click();
    await page.locator('#confirm[open]').waitFor({ state: 'detached' });

    await page.reload();
    await expect.poll(() => page.locator('#holders-body tr').count()).toBe(2);
    expect(await page.evaluate<string>('document.documentElement.lang')).toBe(lang);
    expect(await page.inputValue('#language')).toBe(lang);
    expect(await page.locator('#keys-heading').textContent()).toBe(CATALOGUE[lang]!['keys.heading']);
    await page.context().close();
    expect(problems).toEqual([]);
  });

  it("without a choice, the browser's language when the page has it: a Portuguese browser gets Portuguese, then English once picked", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open('pt-BR');
    await expect.poll(() => page.locator('#keys-body tr').count()).toBe(3);
    expect(await page.evaluate<string>('document.documentElement.lang')).toBe('pt');
    expect(await page.locator('#keys-heading').textContent()).toBe('Chaves');
    await pick(page, 'en');
    expect(await page.locator('#keys-heading').textContent()).toBe('Keys');
    expect(await page.locator('#card-keys').textContent()).toBe('of 3 keys');
    await page.reload();
    await expect.poll(() => page.locator('#keys-body tr').count()).toBe(3);
    expect(await page.evaluate<string>('document.documentElement.lang')).toBe('en');
    await page.context().close();
    expect(problems).toEqual([]);
  });
});

import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasChromium, launchChromium, SKIP_NO_CHROMIUM, startTestServer, TOKEN, watchProblems, type TestServer } from './support.js';

// The page on a server whose reads need the token (bound off loopback, issue 21), in real
// headless Chromium: it asks for the token once, then sends it with every read, the job view's
// too; the tab keeps it.

if (!hasChromium) console.warn(`\n*** ${SKIP_NO_CHROMIUM} ***\n`);

let s: TestServer;
let browser: Browser;
let page: Page;
const problems: string[] = [];

beforeAll(async () => {
  if (!hasChromium) return;
  s = await startTestServer({ host: '0.0.0.0' });
  await s.ledger.enqueueMany([
    { name: 'charge', key: 'shop/orders', limit: 1, jobId: 'order-1' },
    { name: 'charge', key: 'shop/orders', jobId: 'order-2' },
  ]);
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  watchProblems(page, problems);
});

afterAll(async () => {
  await browser?.close();
  await s?.close();
});

/** The problems seen, but for the browser's note of each read refused before the token was given. */
const problemsBesides401 = () => problems.filter((p) => !/Failed to load resource: .* 401/.test(p));

describe('the page where reads need the token', () => {
  it('regression (issue 21: reads off loopback went without a token): asks for the token once, then shows the keys', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    expect(s.url).not.toMatch(/127\.0\.0\.1/);
    await page.goto(s.url);
    await page.locator('#token-dialog[open]').waitFor();
    await page.fill('#token-input', TOKEN);
    await page.locator('#token-save').click();
    await expect.poll(() => page.locator('#keys-body tr[data-key="shop/orders"]').count()).toBe(1);
    expect(await page.locator('#card-parked').textContent()).toBe('1');
    // The tab keeps it: a reload reads with it, and asks nothing.
    await page.reload();
    await expect.poll(() => page.locator('#keys-body tr[data-key="shop/orders"]').count()).toBe(1);
    expect(await page.locator('#token-dialog[open]').count()).toBe(0);
    expect(problemsBesides401()).toEqual([]);
  });

  it("a job's view reads its history and explanation with the token", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    await page.goto(`${s.url}/#job=order-2`);
    await expect.poll(() => page.locator('#job-view').isVisible()).toBe(true);
    await expect.poll(() => page.locator('#job-view').textContent()).toContain('order-1');
    expect(await page.locator('#token-dialog[open]').count()).toBe(0);
    expect(problemsBesides401()).toEqual([]);
  });
});

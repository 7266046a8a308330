import { mkdirSync } from 'node:fs';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyStream } from '../../src/domain/streams.js';
import { hasChromium, launchChromium, rememberToken, SKIP_NO_CHROMIUM, startTestServer, watchProblems, type TestServer } from './support.js';

// The page's views and feedback in real headless Chromium (Debian's package): #key= and #job= as
// views of their own (a new tab, back and forward), confirmations that name what they do, the
// result of an action as a toast in view, values marked stale while the server does not answer.

if (!hasChromium) console.warn(`\n*** ${SKIP_NO_CHROMIUM} ***\n`);

const ARTIFACTS = new URL('../../test-artifacts/', import.meta.url);
const BULK = Array.from({ length: 14 }, (_, i) => `bulk-${String(i).padStart(2, '0')}`);

let s: TestServer;
let browser: Browser;
const problems: string[] = [];

beforeAll(async () => {
  if (!hasChromium) return;
  s = await startTestServer();
  await s.ledger.enqueueMany([
    // bulk-00 holds the one slot; 13 wait.
    ...BULK.map((jobId, i) => ({ name: 'sync', key: 'bulk', jobId, ...(i === 0 ? { limit: 1 } : {}) })),
    { name: 'charge', key: 'shop/orders', limit: 2, jobId: 'order-1' },
    { name: 'charge', key: 'shop/orders', jobId: 'order-2' },
    { name: 'charge', key: 'shop/orders', jobId: 'order-3' },
    { name: 'mail', key: 'other', limit: 1, jobId: 'other-1' },
  ]);
  await s.start('shop/orders', 'order-1', 'worker-a');
  browser = await launchChromium();
  mkdirSync(ARTIFACTS, { recursive: true });
});

afterAll(async () => {
  await browser?.close();
  await s?.close();
});

/** A new tab (its own sessionStorage: no token yet) at `hash`. */
const open = async (hash: string): Promise<Page> => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  watchProblems(page, problems);
  await page.goto(`${s.url}/${hash}`);
  return page;
};

/** Whether the element is within the viewport now (a string: it runs in the page). */
const inView = (page: Page, selector: string) =>
  page.evaluate<boolean>(`(() => { const r = document.querySelector(${JSON.stringify(selector)}).getBoundingClientRect(); return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight && r.left >= 0 && r.right <= innerWidth; })()`);

/** No script error, console error or native dialog since the last check, but for the failed requests `expected` describes (a 404 a test asks for). */
const noProblems = (expected?: RegExp) => {
  expect(problems.filter((p) => !(expected && p.startsWith('console error: Failed to load resource') && expected.test(p)))).toEqual([]);
  problems.length = 0;
};

const selectedKeys = (page: Page) => page.locator('#keys-body tr.selected').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-key')));

describe('the dashboard\'s views and feedback, in headless Chromium', () => {
  it("#key= opened in a new tab shows that key's view in view, its row highlighted; back and forward move between views", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open(`#key=${encodeURIComponent('shop/orders')}`);
    await expect.poll(() => page.locator('#holders-body tr').count()).toBe(2);
    expect(await page.locator('#key-title').textContent()).toBe('shop/orders');
    expect(await inView(page, '#key-heading')).toBe(true);
    expect(await selectedKeys(page)).toEqual(['shop/orders']);
    expect(await page.locator('#keys-body tr.selected a.key-link').getAttribute('aria-current')).toBe('page');

    await page.locator('#keys-body a.key-link', { hasText: 'other' }).click();
    await expect.poll(() => page.locator('#key-title').textContent()).toBe('other');
    await expect.poll(() => selectedKeys(page)).toEqual(['other']);
    await expect.poll(() => inView(page, '#key-heading')).toBe(true);
    await page.goBack();
    await expect.poll(() => page.locator('#key-title').textContent()).toBe('shop/orders');
    await expect.poll(() => selectedKeys(page)).toEqual(['shop/orders']);
    await page.goForward();
    await expect.poll(() => page.locator('#key-title').textContent()).toBe('other');
    await page.locator('#close-key').click();
    await expect.poll(() => page.locator('#key-view').isVisible()).toBe(false);
    expect(await selectedKeys(page)).toEqual([]);
    await page.close();
    noProblems();
  });

  it("#job= is a view of its own: the job's key (linked), its status and its events, reached from a job's id in a key's view; an unknown job says so", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open(`#key=${encodeURIComponent('shop/orders')}`);
    await page.locator('#holders-body tr[data-job="order-1"] a.job-link').click();
    await expect.poll(() => page.locator('#job-events li').count()).toBe(3);
    expect(page.url()).toBe(`${s.url}/#job=order-1`);
    expect(await page.locator('#job-title').textContent()).toBe('order-1');
    expect(await page.locator('#job-key').textContent()).toBe('of key shop/orders');
    expect(await page.locator('#job-key a').getAttribute('href')).toBe(`#key=${encodeURIComponent('shop/orders')}`);
    expect(await page.locator('#job-events li').evaluateAll((items) => items.map((li) => li.getAttribute('data-type')))).toEqual(['JobEnqueued', 'SlotAcquired', 'JobStarted']);
    expect(await page.locator('#job-events li[data-type="JobStarted"]').textContent()).toContain('worker worker-a');
    // worker-a never announced itself: the job is not said to run.
    expect(await page.locator('#job-summary .badge').textContent()).toBe('started; its worker is gone');
    expect(await page.locator('#key-view').isVisible()).toBe(false);
    expect(await selectedKeys(page)).toEqual(['shop/orders']);

    await page.goto(`${s.url}/#job=no-such-job`);
    await expect.poll(() => page.locator('#job-missing').isVisible()).toBe(true);
    expect(await page.locator('#job-body').isVisible()).toBe(false);
    await page.close();
    noProblems(/404 \(Not Found\)/);
  });

  it("a job's renewals are one line that says how many, and 'show each renewal' lists them (issue 23)", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    await s.ledger.enqueue({ name: 'long', key: 'renewing', limit: 1, jobId: 'long-1' });
    await s.start('renewing', 'long-1', 'worker-r');
    const leaseId = (await s.ledger.keyState('renewing')).state.jobs['long-1']!.lease!.leaseId;
    for (let i = 0; i < 5; i++) expect((await s.ledger.execute(keyStream('renewing'), { type: 'Renew', jobId: 'long-1', leaseId }))._tag).toBe('Right');
    const page = await open('#job=long-1');
    await expect.poll(() => page.locator('#job-events li').count()).toBe(4);
    expect(await page.locator('#job-events li[data-type="LeaseRenewed"]').textContent()).toContain('renewed 5 times since');
    await page.locator('#job-events button.show-renewals').click();
    await expect.poll(() => page.locator('#job-events li[data-type="LeaseRenewed"]').count()).toBe(5);
    expect(await page.locator('#job-events button.show-renewals').count()).toBe(0);
    await page.close();
    noProblems();
  });

  it('a release names what happens to each holder, and changes nothing when cancelled', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open(`#key=${encodeURIComponent('shop/orders')}`);
    await expect.poll(() => page.locator('#release-all').isVisible()).toBe(true);
    const before = await s.eventCount();
    await page.locator('#release-all').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await page.locator('#confirm-title').textContent()).toBe('Release all 2 holders of “shop/orders”?');
    expect(await page.locator('#confirm-list li').allTextContents()).toEqual(['order-1', 'order-2']);
    const text = await page.locator('#confirm-text').textContent();
    expect(text).toContain('1 of them has started: like a failed attempt, it is retried after a backoff');
    expect(text).toContain('1 has not started: it waits in line again at its place.');
    expect(await page.locator('#confirm-ok').textContent()).toBe('Release 2 holders');
    await page.keyboard.press('Escape');
    await page.locator('#confirm[open]').waitFor({ state: 'detached' });

    await page.locator('#holders-body tr[data-job="order-1"] button.release').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await page.locator('#confirm-text').textContent()).toContain('It has started (attempt 1)');
    expect(await page.locator('#confirm-warning').textContent()).toContain('its worker worker-a is gone');
    await page.locator('#confirm-cancel').click();
    await page.locator('#holders-body tr[data-job="order-2"] button.release').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await page.locator('#confirm-text').textContent()).toContain('No worker has started it: it waits in line again');
    expect(await page.locator('#confirm-warning').isVisible()).toBe(false);
    await page.locator('#confirm-cancel').click();
    expect(await page.locator('#token-dialog[open]').count()).toBe(0);
    expect(await s.eventCount()).toBe(before);
    await page.close();
    noProblems();
  });

  it('Discard all names the count and the first ids, on a filled red button with focus on Cancel; its result is a toast in view, scrolled down in the key view', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open('#key=bulk');
    await rememberToken(page);
    await expect.poll(() => page.locator('#parked-body tr').count()).toBe(13);
    await page.evaluate('window.scrollTo(0, document.body.scrollHeight)');
    await page.locator('#discard-all').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await page.locator('#confirm-title').textContent()).toBe('Discard all 13 parked jobs of “bulk”?');
    expect(await page.locator('#confirm-list li').allTextContents()).toEqual([...BULK.slice(1, 6), 'and 8 more']);
    expect(await page.evaluate<string>('document.activeElement.id')).toBe('confirm-cancel');
    const colors = await page.evaluate<{ ok: string; okBorder: string; cancel: string }>(
      `(() => { const ok = getComputedStyle(document.getElementById('confirm-ok')); return { ok: ok.backgroundColor, okBorder: ok.borderColor, cancel: getComputedStyle(document.getElementById('confirm-cancel')).backgroundColor }; })()`,
    );
    expect(colors.ok).toBe(colors.okBorder);
    expect(colors.ok).not.toBe('rgba(0, 0, 0, 0)');
    expect(colors.cancel).toBe('rgba(0, 0, 0, 0)');
    expect(await page.locator('#confirm-ok').textContent()).toBe('Discard 13 jobs');
    await page.screenshot({ path: new URL('page-confirm.png', ARTIFACTS).pathname });

    await page.locator('#confirm-ok').click();
    const toast = page.locator('#toasts .toast.ok');
    await expect.poll(() => toast.locator('.toast-text').textContent()).toBe('Discarded 13 parked jobs of bulk.');
    expect(await page.evaluate<number>('window.scrollY')).toBeGreaterThan(0);
    expect(await inView(page, '#toasts .toast.ok')).toBe(true);
    expect(await page.locator('#toasts').getAttribute('aria-live')).toBe('polite');
    await page.screenshot({ path: new URL('page-toast.png', ARTIFACTS).pathname });
    await expect.poll(() => page.locator('#parked-body tr').count()).toBe(0);
    expect((await s.ledger.keyDetail('bulk'))?.parked).toEqual([]);
    await page.close();
    noProblems();
  });

  it('a refused action: the server\'s error inside a translated frame, as a toast that stays until dismissed while a success fades', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    watchProblems(page, problems);
    await page.clock.install();
    await page.goto(`${s.url}/#key=${encodeURIComponent('shop/orders')}`);
    await rememberToken(page);
    await page.route('**/api/keys/discard', (route) => route.fulfill({ status: 409, contentType: 'application/json', body: JSON.stringify({ error: 'job order-3 is not parked' }) }));
    await expect.poll(() => page.locator('#parked-body tr[data-job="order-3"]').count()).toBe(1);
    await page.locator('#parked-body tr[data-job="order-3"] button.discard').click();
    await page.locator('#confirm-ok').click();
    const error = page.locator('#toasts .toast.error');
    await expect.poll(() => error.locator('.toast-text').textContent()).toBe('Not done. The server refused: job order-3 is not parked');
    // A success next to it fades; the error stays.
    await page.locator('#pause-toggle').click();
    await page.locator('#confirm-ok').click();
    await expect.poll(() => page.locator('#toasts .toast.ok').count()).toBe(1);
    await page.clock.fastForward(60_000);
    await expect.poll(() => page.locator('#toasts .toast.ok').count()).toBe(0);
    expect(await error.count()).toBe(1);
    expect(await error.locator('button.dismiss').getAttribute('aria-label')).toBe('Dismiss');
    await error.locator('button.dismiss').click();
    expect(await page.locator('#toasts .toast').count()).toBe(0);
    await page.close();
    await s.ledger.resume({ key: 'shop/orders', by: 'test' });
    noProblems(/409 \(Conflict\)/);
  });

  it('the server stops answering: values are dimmed and the status says since when; they recover when it answers again', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open('');
    await expect.poll(() => page.locator('#status').textContent()).toMatch(/^updated /);
    const opacity = () => page.evaluate<string>(`getComputedStyle(document.getElementById('card-slots')).opacity`);
    expect(await opacity()).toBe('1');
    // The server gone, as the browser sees it: every request to it fails to connect.
    await page.route('**/api/**', (route) => route.abort('connectionrefused'));
    await expect.poll(() => page.locator('#status').textContent(), { timeout: 10_000 }).toMatch(/^last updated .+, the server does not answer$/);
    expect(await page.locator('main').getAttribute('class')).toContain('stale');
    expect(Number(await opacity())).toBeLessThan(1);
    await page.screenshot({ path: new URL('page-stale.png', ARTIFACTS).pathname });
    await page.unroute('**/api/**');
    await expect.poll(() => page.locator('#status').textContent(), { timeout: 10_000 }).toMatch(/^updated /);
    expect(await opacity()).toBe('1');
    await page.close();
    noProblems(/ERR_CONNECTION_REFUSED/);
  });
});

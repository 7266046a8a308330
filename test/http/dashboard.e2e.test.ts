import { mkdirSync } from 'node:fs';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasChromium, launchChromium, SKIP_NO_CHROMIUM as SKIP_NOTE, startTestServer, TOKEN, watchProblems, type TestServer } from './support.js';

// The dashboard in real headless Chromium (Debian's package, driven by playwright-core), on a
// seeded ledger served in-process. Without /usr/bin/chromium (a developer machine) it is skipped,
// and says so; CI installs the package (.ci/run).

if (!hasChromium) console.warn(`\n*** ${SKIP_NOTE} ***\n`);

const ARTIFACTS = new URL('../../test-artifacts/', import.meta.url);
const HOSTILE = '<img src=x onerror=alert(1)>';

let s: TestServer;
let browser: Browser;
let page: Page;
const problems: string[] = [];

beforeAll(async () => {
  if (!hasChromium) return;
  s = await startTestServer();
  await s.ledger.enqueueMany([
    { name: 'charge', key: 'shop/orders', limit: 2, jobId: 'order-1' },
    { name: 'charge', key: 'shop/orders', jobId: 'order-2' },
    { name: 'charge', key: 'shop/orders', jobId: 'order-3' },
    { name: 'probe', key: HOSTILE, limit: 1, jobId: 'hostile-1' },
    { name: 'probe', key: HOSTILE, jobId: 'hostile-2' },
    { name: 'mail', key: 'ключ 🔑', limit: 2, jobId: 'uni-1' },
  ]);
  // A worker started order-1 and never announced itself (its holder state: worker gone); its lease is live, so releasing it must warn.
  await s.start('shop/orders', 'order-1', 'worker-a');
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  // An alert() would mean the hostile key's markup ran.
  watchProblems(page, problems);
  mkdirSync(ARTIFACTS, { recursive: true });
});

afterAll(async () => {
  await browser?.close();
  await s?.close();
});

const card = (id: string) => page.locator(`#${id}`);

describe('the dashboard in headless Chromium', () => {
  it('shows the keys and the cards\' counts', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    await page.goto(s.url);
    await expect.poll(() => card('card-slots').textContent()).toBe('4');
    expect(await card('card-at-limit').textContent()).toBe('2');
    expect(await card('card-keys').textContent()).toBe('of 3 keys');
    expect(await card('card-parked').textContent()).toBe('2');
    expect(await card('card-oldest').textContent()).toMatch(/\d sec$/);
    // The ledger's size (the catalog's estimate of its rows, and its bytes), live and archived.
    expect(await card('card-ledger').textContent()).toMatch(/^\d+ events$/);
    expect(await card('card-ledger-size').textContent()).toMatch(/^[\d.]+ MB live, 0 MB archived$/);
    const rows = page.locator('#keys-body tr');
    expect(await rows.count()).toBe(3);
    expect(await page.locator('#keys-body tr[data-key="shop/orders"] td').allTextContents()).toEqual(['shop/ordersneeds attention', '2 / 2at limit', 'worker gone', '1', '0', expect.stringMatching(/ sec$/)]);
    expect(await page.locator('#keys-body tr[data-key="ключ 🔑"] td').nth(1).textContent()).toBe('1 / 2');
  });

  it('renders the hostile key as text: no img element, the characters visible', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    const link = page.locator('#keys-body a.key-link', { hasText: 'onerror' });
    await expect.poll(() => link.count()).toBe(1);
    expect(await link.textContent()).toBe(HOSTILE);
    expect(await link.isVisible()).toBe(true);
    expect(await page.locator('img').count()).toBe(0);
    await link.click();
    await expect.poll(() => page.locator('#key-title').textContent()).toBe(HOSTILE);
    expect(await page.locator('#key-title').isVisible()).toBe(true);
    await expect.poll(() => page.locator('#holders-body tr[data-job="hostile-1"]').count()).toBe(1);
    expect(await page.locator('img').count()).toBe(0);
    expect(problems).toEqual([]);
  });

  it('filters and sorts the keys table on the server: a column sorts by it in its own direction first, then the other way', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    await page.fill('#filter', 'SHOP');
    await expect.poll(() => page.locator('#keys-body tr').count()).toBe(1);
    expect(await page.locator('#keys-body tr').getAttribute('data-key')).toBe('shop/orders');
    await page.fill('#filter', '');
    await expect.poll(() => page.locator('#keys-body tr').count()).toBe(3);
    // Parked: most first, then fewest first.
    await page.click('#keys-table th[data-sort="parked"] button');
    await expect.poll(() => page.locator('#keys-table th[data-sort="parked"]').getAttribute('aria-sort')).toBe('descending');
    expect(await page.locator('#keys-body tr').last().getAttribute('data-key')).toBe('ключ 🔑');
    await page.click('#keys-table th[data-sort="parked"] button');
    await expect.poll(() => page.locator('#keys-table th[data-sort="parked"]').getAttribute('aria-sort')).toBe('ascending');
    expect(await page.locator('#keys-body tr').first().getAttribute('data-key')).toBe('ключ 🔑');
    // Back to the default: the keys needing attention first (shop/orders: a holder whose worker is gone).
    await page.selectOption('#keys-sort', 'attention');
    await expect.poll(() => page.locator('#keys-table th[data-sort="parked"]').getAttribute('aria-sort')).toBe('none');
    expect(await page.locator('#keys-body tr').first().getAttribute('data-key')).toBe('shop/orders');
    expect(await page.locator('#keys-body tr[data-key="shop/orders"] .attention-badge').count()).toBe(1);
    // A filter that leaves nothing says so.
    await page.check('#only-attention');
    await page.fill('#filter', 'ключ');
    await expect.poll(() => page.locator('#keys-body tr').count()).toBe(0);
    expect(await page.locator('#keys-empty').isVisible()).toBe(true);
    expect(await page.locator('#keys-empty').textContent()).toBe('No key matches the filter.');
    await page.uncheck('#only-attention');
    await page.fill('#filter', '');
    await expect.poll(() => page.locator('#keys-body tr').count()).toBe(3);
    expect(problems).toEqual([]);
  });

  it('releases a running holder through the UI: warns that its lease is live, asks the token once, and the counts change', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    await page.locator('#keys-body a.key-link', { hasText: 'shop/orders' }).click();
    await expect.poll(() => page.locator('#holders-body tr').count()).toBe(2);
    expect(await page.locator('#parked-body tr').count()).toBe(1);

    // Cancelling the confirmation changes nothing.
    const before = await s.eventCount();
    await page.locator('#holders-body tr[data-job="order-1"] button.release').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await page.locator('#confirm-warning').isVisible()).toBe(true);
    expect(await page.locator('#confirm-warning').textContent()).toContain('lease is still live');
    await page.locator('#confirm button[value="cancel"]').click();
    await page.locator('#confirm[open]').waitFor({ state: 'detached' });
    expect(await page.locator('#token-dialog[open]').count()).toBe(0);
    expect(await s.eventCount()).toBe(before);

    await page.locator('#holders-body tr[data-job="order-1"] button.release').click();
    await page.locator('#confirm[open]').waitFor();
    await page.locator('#confirm-ok').click();
    // No token in this tab yet: the page asks for it once.
    await page.locator('#token-dialog[open]').waitFor();
    await page.fill('#token-input', TOKEN);
    await page.locator('#token-save').click();

    await expect.poll(() => card('card-parked').textContent()).toBe('1');
    expect(await card('card-slots').textContent()).toBe('4');
    await expect.poll(() => page.locator('#toasts').textContent()).toContain('Released 1 slot');
    await expect.poll(() => page.locator('#holders-body tr[data-job="order-3"]').count()).toBe(1);
    expect(await page.locator('#holders-body tr[data-job="order-1"]').count()).toBe(0);
    expect(await page.locator('#parked-body tr').count()).toBe(0);
    const revoked = page.locator('#handoffs li', { hasText: 'order-1' }).first();
    expect(await revoked.textContent()).toContain('revoked by http 127.0.0.1');
    expect((await s.ledger.keyDetail('shop/orders'))?.holders.map((h) => h.jobId).sort()).toEqual(['order-2', 'order-3']);

    await page.screenshot({ path: new URL('dashboard.png', ARTIFACTS).pathname, fullPage: true });
  });

  it('the token is kept for the tab: discarding parked jobs asks no token again', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    await page.goto(`${s.url}#key=${encodeURIComponent(HOSTILE)}`);
    await expect.poll(() => page.locator('#parked-body tr').count()).toBe(1);
    await page.locator('#parked-body tr[data-job="hostile-2"] button.discard').click();
    await page.locator('#confirm-ok').click();
    await expect.poll(() => page.locator('#parked-body tr').count()).toBe(0);
    expect(await page.locator('#token-dialog[open]').count()).toBe(0);
    await expect.poll(() => card('card-parked').textContent()).toBe('0');
  });

  it('pauses and resumes a key from its view: a banner says by whom, the keys list shows a badge, the ledger records both', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    await page.goto(`${s.url}#key=${encodeURIComponent('ключ 🔑')}`);
    await expect.poll(() => page.locator('#pause-toggle').textContent()).toBe('Pause key');
    await page.locator('#pause-toggle').click();
    await page.locator('#confirm-ok').click();
    await expect.poll(() => page.locator('#key-paused').isVisible()).toBe(true);
    expect(await page.locator('#key-paused').textContent()).toContain('Paused by');
    await expect.poll(() => page.locator('#keys-body .paused-badge').count()).toBe(1);
    await expect.poll(() => page.locator('#pause-toggle').textContent()).toBe('Resume key');
    await page.locator('#pause-toggle').click();
    await page.locator('#confirm-ok').click();
    await expect.poll(() => page.locator('#key-paused').isVisible()).toBe(false);
    // The keys list is read apart from the key's view: it may show the resume a refresh later.
    await expect.poll(() => page.locator('#keys-body .paused-badge').count()).toBe(0);
    const events = (await s.ledger.audit({ key: 'ключ 🔑' })).events.map((e) => e.type);
    expect(events.filter((t) => t === 'KeyPaused' || t === 'KeyResumed')).toEqual(['KeyPaused', 'KeyResumed']);
  });

  it('fits a phone screen: nothing wider than the viewport', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    await phone.goto(`${s.url}#key=shop%2Forders`);
    await expect.poll(() => phone.locator('#holders-body tr').count()).toBe(2);
    // A string: runs in the page, where the DOM is (this project's TypeScript has no DOM types).
    const overflow = await phone.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth');
    expect(overflow).toBeLessThanOrEqual(0);
    await phone.screenshot({ path: new URL('dashboard-phone.png', ARTIFACTS).pathname, fullPage: true });
    await phone.close();
    expect(problems).toEqual([]);
  });
});

import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasChromium, launchChromium, SKIP_NO_CHROMIUM, startTestServer, watchProblems, type TestServer } from './support.js';

// The keys table a page at a time and "needs attention" one line per cause, in headless Chromium
// (Debian's package), over 121 keys: 120 tenants on a queue no worker reads (each a holder
// admitted and not started, a job parked behind it) and one key whose holder's worker is gone.

if (!hasChromium) console.warn(`\n*** ${SKIP_NO_CHROMIUM} ***\n`);

const TENANTS = Array.from({ length: 120 }, (_, i) => `tenant-${String(i).padStart(3, '0')}`);

let now = Date.now();
let s: TestServer;
let browser: Browser;
let page: Page;
const problems: string[] = [];
/** The statuses of the page's reads of /api/keys. */
const keyReads: number[] = [];

beforeAll(async () => {
  if (!hasChromium) return;
  s = await startTestServer({ clock: () => now });
  await s.ledger.enqueueMany(TENANTS.flatMap((key) => [{ name: 'work', key, limit: 1, queue: 'nobody' }, { name: 'work', key, queue: 'nobody' }]));
  await s.ledger.enqueue({ name: 'work', key: 'zz/ghost', limit: 1, queue: 'nobody', leaseMs: 3_600_000, jobId: 'ghost-1' });
  // Started by a worker that never announced itself: nobody runs it.
  await s.start('zz/ghost', 'ghost-1', 'ghost');
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  watchProblems(page, problems);
  page.on('response', (response) => {
    if (new URL(response.url()).pathname === '/api/keys') keyReads.push(response.status());
  });
});

afterAll(async () => {
  await browser?.close();
  await s?.close();
});

const rowKeys = () => page.locator('#keys-body tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-key')));

describe('121 keys in the dashboard', () => {
  it('the table shows a page of 50 in the server\'s order (the key needing attention first), says where it is, and pages on and back', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    await page.goto(s.url);
    await expect.poll(() => page.locator('#keys-body tr').count()).toBe(50);
    expect(await rowKeys()).toEqual(['zz/ghost', ...TENANTS.slice(0, 49)]);
    expect(await page.locator('#keys-range').textContent()).toBe('1–50 of 121 keys');
    expect(await page.locator('#keys-prev').isDisabled()).toBe(true);
    expect(await page.inputValue('#keys-sort')).toBe('attention');
    // The cards count every key, not the page.
    expect(await page.locator('#card-keys').textContent()).toBe('of 121 keys');

    await page.click('#keys-next');
    await expect.poll(() => page.locator('#keys-range').textContent()).toBe('51–100 of 121 keys');
    expect(await rowKeys()).toEqual(TENANTS.slice(49, 99));
    await page.click('#keys-next');
    await expect.poll(() => page.locator('#keys-range').textContent()).toBe('101–121 of 121 keys');
    expect(await rowKeys()).toEqual(TENANTS.slice(99));
    expect(await page.locator('#keys-next').isDisabled()).toBe(true);
    await page.click('#keys-prev');
    await expect.poll(() => page.locator('#keys-range').textContent()).toBe('51–100 of 121 keys');

    // A filter starts from its first page; one page needs no pager.
    await page.fill('#filter', 'tenant-11');
    await expect.poll(() => rowKeys()).toEqual(TENANTS.slice(110, 120));
    expect(await page.locator('#keys-pager').isVisible()).toBe(false);
    await page.fill('#filter', '');
    await expect.poll(() => page.locator('#keys-range').textContent()).toBe('1–50 of 121 keys');
    expect(problems).toEqual([]);
  });

  it('needs attention: one line per cause, the queue nobody reads first; 120 keys with unstarted holders are one line naming 5 of them', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const kinds = () => page.locator('#warnings-list li').evaluateAll((items) => items.map((li) => li.getAttribute('data-kind')));
    await expect.poll(kinds).toEqual(['queue-without-consumer', 'holders-worker-gone']);
    expect(await page.locator('#warnings-list li[data-kind="holders-worker-gone"]').textContent()).toBe(
      'zz/ghost: 1 holder whose worker is gone: nobody runs it until the sweeper reclaims its lease when it runs out.',
    );
    // The ledger's clock moves past the unstarted warning's threshold; nothing is written.
    now += 60_000;
    await expect.poll(kinds).toEqual(['queue-without-consumer', 'holders-unstarted', 'holders-worker-gone']);
    const unstarted = page.locator('#warnings-list li[data-kind="holders-unstarted"]');
    expect(await unstarted.textContent()).toMatch(
      /^120 keys have holders admitted and not started, the oldest for 1 min \d+ sec: no worker takes them\. Queue nobody, where they wait, has no live worker reading it\. tenant-000, tenant-001, tenant-002, tenant-003, tenant-004 and 115 more$/,
    );
    expect(await page.locator('#warnings-list li[data-kind="queue-without-consumer"]').textContent()).toMatch(/^Queue nobody: 121 messages, the oldest 1 min \d+ sec old, and no live worker reading it\.$/);
    // Every tenant needs attention now: the table's first page says so.
    await expect.poll(() => page.locator('#keys-body .attention-badge').count()).toBe(50);
    await unstarted.locator('a', { hasText: 'tenant-003' }).click();
    await expect.poll(() => page.locator('#key-title').textContent()).toBe('tenant-003');
    expect(problems).toEqual([]);
  });

  it('a poll of a ledger where nothing moved is a 304, and the page keeps showing what it read', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    await page.goto(`${s.url}/#`);
    await expect.poll(() => page.locator('#keys-body tr').count()).toBe(50);
    const before = keyReads.length;
    await expect.poll(() => keyReads.slice(before).filter((status) => status === 304).length, { timeout: 15_000 }).toBeGreaterThan(0);
    expect(await page.locator('#keys-body tr').count()).toBe(50);
    expect(await page.locator('#keys-range').textContent()).toBe('1–50 of 121 keys');
    expect(await page.locator('#warnings-list li').count()).toBe(3);
    expect(await page.locator('#status').getAttribute('class')).not.toContain('stale');
    expect(problems).toEqual([]);
  });
});

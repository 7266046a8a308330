import { mkdirSync } from 'node:fs';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hasChromium, launchChromium, SKIP_NO_CHROMIUM as SKIP_NOTE, startTestServer, TOKEN, watchProblems, type TestServer } from './support.js';

// The key view of jobs under further limits in real headless Chromium (as dashboard.e2e.test.ts):
// a limit key's guests (jobs of other keys holding or waiting there) say which key they are from,
// a parked job says which of its other limits it waits on, and a job's further limits are badges.

if (!hasChromium) console.warn(`\n*** ${SKIP_NOTE} ***\n`);

const ARTIFACTS = new URL('../../test-artifacts/', import.meta.url);
const TENANT = 'tenant:acme';

let s: TestServer;
let browser: Browser;
let page: Page;
const problems: string[] = [];

beforeAll(async () => {
  if (!hasChromium) return;
  s = await startTestServer();
  // o1 holds its key and the tenant's one slot; o2 and m1 wait for the tenant, m1 for the paused api too.
  await s.ledger.enqueue({ name: 'charge', key: 'orders/eu', limit: 1, jobId: 'o1', limits: [{ key: TENANT, limit: 1 }] });
  await s.start('orders/eu', 'o1', 'worker-a');
  await s.ledger.enqueue({ name: 'charge', key: 'orders/us', limit: 1, jobId: 'o2', limits: [{ key: TENANT }] });
  await s.ledger.enqueue({ name: 'notify', key: 'mail', limit: 1, jobId: 'm1', limits: [{ key: TENANT }, { key: 'api', limit: 2 }] });
  await s.ledger.pause({ key: 'api', by: 'ops' });
  browser = await launchChromium();
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  watchProblems(page, problems);
  mkdirSync(ARTIFACTS, { recursive: true });
});

afterAll(async () => {
  await browser?.close();
  await s?.close();
});

const open = async (key: string) => {
  await page.goto(`${s.url}#key=${encodeURIComponent(key)}`);
  await expect.poll(() => page.locator('#key-title').textContent()).toBe(key);
};
const row = (table: 'holders' | 'parked', jobId: string) => page.locator(`#${table}-body tr[data-job="${jobId}"]`);
const badges = (scope: ReturnType<Page['locator']>) => scope.locator('.limit-badge').allTextContents();

describe('the key view of jobs under further limits, in headless Chromium', () => {
  it("a limit key: its guests say which key they are from, linked to that key's view; a parked one says what else it waits on", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    await open(TENANT);
    await expect.poll(() => row('holders', 'o1').count()).toBe(1);
    const holder = row('holders', 'o1');
    expect(await holder.locator('.from-key').textContent()).toBe('from key orders/eu');
    expect(await holder.locator('.from-key a').getAttribute('href')).toBe(`#key=${encodeURIComponent('orders/eu')}`);
    // Its only further limit is this key: no badge.
    expect(await badges(holder)).toEqual([]);
    // Its state is its home slot's: started by worker-a, which never announced itself.
    expect(await holder.locator('td').nth(1).textContent()).toBe('worker gone: worker-a, no heartbeat known');

    await expect.poll(() => page.locator('#parked-body tr').count()).toBe(2);
    expect(await page.locator('#parked-body tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-job')))).toEqual(['o2', 'm1']);
    expect(await row('parked', 'o2').locator('.from-key').textContent()).toBe('from key orders/us');
    expect(await row('parked', 'o2').locator('.waits-on').count()).toBe(0);
    const m1 = row('parked', 'm1');
    expect(await m1.locator('.from-key').textContent()).toBe('from key mail');
    expect(await badges(m1)).toEqual(['api']);
    expect(await m1.locator('.waits-on').textContent()).toBe('waits on: api (paused)');
    // The badges are announced as what they are.
    expect(await m1.locator('.limits').textContent()).toBe('also under limits: api');

    // Nothing of the key's own to release or discard in bulk: guests are acted on at their own keys.
    expect(await page.locator('#release-all').isVisible()).toBe(false);
    expect(await page.locator('#discard-all').isVisible()).toBe(false);

    const handoff = page.locator('#handoffs li[data-job="o1"]');
    expect(await handoff.locator('.from-key').textContent()).toBe('from key orders/eu');
    expect(await handoff.locator('.handoff-body').textContent()).toContain('worker and attempt at its own key');
    expect(problems).toEqual([]);
  });

  it('a home key: a parked job under further limits shows them as badges and which of them are full or paused', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    await open('mail');
    await expect.poll(() => row('parked', 'm1').count()).toBe(1);
    const m1 = row('parked', 'm1');
    expect(await m1.locator('.from-key').count()).toBe(0);
    expect(await badges(m1)).toEqual([TENANT, 'api']);
    expect(await m1.locator('.waits-on').textContent()).toBe(`waits on: ${TENANT} (1/1 full), api (paused)`);

    await open('orders/eu');
    await expect.poll(() => row('holders', 'o1').count()).toBe(1);
    expect(await badges(row('holders', 'o1'))).toEqual([TENANT]);
    expect(await badges(page.locator('#handoffs li[data-job="o1"]'))).toEqual([TENANT]);
    expect(problems).toEqual([]);
  });

  it("releasing a guest from the limit key's view releases it at its own key: the tenant's slot goes to the next in its line", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    await open(TENANT);
    await expect.poll(() => row('holders', 'o1').count()).toBe(1);
    await row('holders', 'o1').locator('button.release').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await page.locator('#confirm-text').textContent()).toContain('released at its own key “orders/eu”');
    expect(await page.locator('#confirm-warning').textContent()).toContain('lease is still live');
    await page.locator('#confirm-ok').click();
    await page.locator('#token-dialog[open]').waitFor();
    await page.fill('#token-input', TOKEN);
    await page.locator('#token-save').click();

    await expect.poll(() => page.locator('#toasts').textContent()).toContain('Released 1 slot of orders/eu');
    await expect.poll(() => row('holders', 'o2').count()).toBe(1);
    expect(await row('holders', 'o2').locator('.from-key').textContent()).toBe('from key orders/us');
    expect(await row('holders', 'o1').count()).toBe(0);
    expect(await page.locator('#parked-body tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-job')))).toEqual(['m1']);
    const revoked = page.locator('#handoffs li[data-job="o1"]');
    expect(await revoked.locator('.badge').last().textContent()).toBe('revoked');
    expect((await s.ledger.audit({ key: 'orders/eu' })).handoffs[0]).toMatchObject({ jobId: 'o1', reason: 'revoked', limits: [TENANT] });
    await page.screenshot({ path: new URL('dashboard-limits.png', ARTIFACTS).pathname, fullPage: true });
    expect(problems).toEqual([]);
  });

  it('fits a phone screen: nothing wider than the viewport', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NOTE);
    const phone = await browser.newPage({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true });
    await phone.goto(`${s.url}#key=${encodeURIComponent('mail')}`);
    await expect.poll(() => phone.locator('#parked-body tr .waits-on').count()).toBe(1);
    const overflow = await phone.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth');
    expect(overflow).toBeLessThanOrEqual(0);
    await phone.screenshot({ path: new URL('dashboard-limits-phone.png', ARTIFACTS).pathname, fullPage: true });
    await phone.close();
    expect(problems).toEqual([]);
  });
});

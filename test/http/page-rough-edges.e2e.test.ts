import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { hasChromium, launchChromium, SKIP_NO_CHROMIUM, startTestServer, watchProblems, type TestServer } from './support.js';

// Issue 25, the page as a new user found it, in headless Chromium: keys at their limit above
// roomy ones by default; which jobs each worker runs; a job's args; ids and keys that never break
// inside; an empty queue's oldest message; plurals and numbers in Portuguese and Swedish.

if (!hasChromium) console.warn(`\n*** ${SKIP_NO_CHROMIUM} ***\n`);

const LONG_JOB = `order-2026-12-05-${'0123456789'.repeat(8)}`;
const LONG_KEY = `tenant/${'acme-'.repeat(20)}eu`;
/** Args whose text the page must show as text, never as markup. */
const ARGS = { to: '<img src=x onerror=alert(1)>', n: 1, nested: { a: [1, 2] } };
const BUSY = Array.from({ length: 7 }, (_, i) => `busy-${i}`);
/** Leases that outlast the test: a lapsed one would make its key need attention and move it up. */
const HOUR = 3_600_000;

let s: TestServer;
let browser: Browser;

beforeAll(async () => {
  if (!hasChromium) return;
  s = await startTestServer();
  // A live worker (a heartbeat an hour long) reading a queue with nothing in it, running 7 jobs of 7 keys.
  await s.db.pool.query(
    `INSERT INTO workers (id, host, pid, queue, concurrency, heartbeat_ms, started_at, last_seen, running) VALUES ('w-live', 'h', 1, 'empty-q', 8, 3600000, now(), now(), 7)`,
  );
  for (const jobId of BUSY) {
    await s.ledger.enqueue({ name: 'run', key: `busy/${jobId}`, limit: 1, leaseMs: HOUR, jobId });
    await s.start(`busy/${jobId}`, jobId, 'w-live');
  }
  // Before them by key, after them in the default order: a key with room, one holder of its 3.
  await s.ledger.enqueue({ name: 'run', key: 'a-roomy', limit: 3, leaseMs: HOUR, jobId: 'roomy-1', args: ARGS });
  await s.start('a-roomy', 'roomy-1', 'w-live');
  await s.ledger.enqueue({ name: 'run', key: LONG_KEY, limit: 1, leaseMs: HOUR, jobId: LONG_JOB, args: { blob: 'x'.repeat(5_000) } });
  await s.start(LONG_KEY, LONG_JOB, 'w-live');
  browser = await launchChromium();
});

afterAll(async () => {
  await browser?.close();
  await s?.close();
});

/** Runs `check` in a new tab at `hash`, `width` px wide, and closes it: no script error, console error or native dialog meanwhile. */
const inPage = async (ctx: TestContext, hash: string, check: (page: Page) => Promise<void>, width = 1280): Promise<void> => {
  ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
  const problems: string[] = [];
  const page = await browser.newPage({ viewport: { width, height: 900 } });
  watchProblems(page, problems);
  await page.goto(`${s.url}/${hash}`);
  await check(page);
  await page.close();
  expect(problems).toEqual([]);
};

/** How an element is drawn (a string: it runs in the page): one line's height, its text cut with an ellipsis, its text and title (or its link's), and what selecting it copies. */
const drawn = (page: Page, selector: string) =>
  page.evaluate<{ oneLine: boolean; cut: boolean; text: string; title: string | null; copied: string }>(`(() => {
    const node = document.querySelector(${JSON.stringify(selector)});
    const style = getComputedStyle(node);
    const selection = getSelection();
    selection.selectAllChildren(node);
    const copied = selection.toString();
    selection.removeAllRanges();
    return {
      oneLine: node.getBoundingClientRect().height <= parseFloat(style.lineHeight) * 1.5,
      cut: node.scrollWidth > node.clientWidth && style.textOverflow === 'ellipsis',
      text: node.textContent,
      title: node.getAttribute('title') ?? node.parentElement.getAttribute('title'),
      copied,
    };
  })()`);

describe('the page, issue 25', () => {
  it('by default, keys at their limit come before a key with room (the server\'s attention order), though the key order puts it first', (ctx) =>
    inPage(ctx, '', async (page) => {
      await expect.poll(() => page.locator('#keys-body tr').count()).toBe(9);
      expect(await page.inputValue('#keys-sort')).toBe('attention');
      const order = await page.locator('#keys-body tr').evaluateAll((rows) => rows.map((r) => r.getAttribute('data-key')));
      expect(order.at(-1)).toBe('a-roomy');
    }));

  it("the workers table names each worker's running jobs with their keys, the first 5 and +N more; a job links to its view", (ctx) =>
    inPage(ctx, '', async (page) => {
      const jobs = page.locator('#workers-body tr[data-worker="w-live"] .worker-jobs');
      await expect.poll(() => jobs.locator('li[data-job]').count()).toBe(5);
      expect(await jobs.locator('li.more').textContent()).toBe('+4 more');
      // Newest first: the long job, the roomy one, then the last busy ones.
      expect(await jobs.locator('li[data-job]').evaluateAll((items) => items.map((li) => li.getAttribute('data-job')))).toEqual([LONG_JOB, 'roomy-1', 'busy-6', 'busy-5', 'busy-4']);
      expect(await jobs.locator('li[data-job="busy-6"]').textContent()).toBe('busy-6 busy/busy-6');
      await jobs.locator('li[data-job="busy-6"] a.job-link').click();
      await expect.poll(() => page.locator('#job-title').textContent()).toBe('busy-6');
      // Enqueued without args: no args shown (not "null").
      await expect.poll(() => page.locator('#job-events li').count()).toBe(3);
      expect(await page.locator('#job-args-block').isVisible()).toBe(false);
    }));

  it('an empty queue a live worker reads has no oldest message: –, not "0.0 sec"', (ctx) =>
    inPage(ctx, '', async (page) => {
      const row = page.locator('#queues-body tr[data-queue="empty-q"]');
      await expect.poll(() => row.count()).toBe(1);
      expect(await row.locator('td').allTextContents()).toEqual(['empty-q', '0', '0', '–', '1 worker (8 at once)']);
    }));

  it("a job's view shows its args, pretty and as text (markup in them is not parsed)", (ctx) =>
    inPage(ctx, '#job=roomy-1', async (page) => {
      await expect.poll(() => page.locator('#job-args').textContent()).not.toBe('');
      // As the ledger keeps them (jsonb orders an object's keys), two spaces an indent.
      const text = (await page.locator('#job-args').textContent())!;
      expect(JSON.parse(text)).toEqual(ARGS);
      expect(text).toBe(JSON.stringify(JSON.parse(text), null, 2));
      expect(await page.locator('#job-args img').count()).toBe(0);
      expect(await page.locator('#job-args-cut').isVisible()).toBe(false);
    }));

  it("a job's long args are cut, saying how much is not shown, in a box of bounded height", (ctx) =>
    inPage(ctx, `#job=${encodeURIComponent(LONG_JOB)}`, async (page) => {
      const whole = JSON.stringify({ blob: 'x'.repeat(5_000) }, null, 2);
      await expect.poll(() => page.locator('#job-args-cut').textContent()).toBe(`… and ${(whole.length - 2_000).toLocaleString('en')} more characters, not shown`);
      expect(await page.locator('#job-args').textContent()).toBe(whole.slice(0, 2_000));
      const box = await page.locator('#job-args').evaluate((node) => ({ height: node.clientHeight, scrolls: node.scrollWidth > node.clientWidth }));
      expect(box.height).toBeLessThanOrEqual(16 * 15);
      expect(box.scrolls).toBe(true);
    }));

  it.for([1280, 375])('ids and keys never break inside, at %i px: one line, cut with an ellipsis, copied and titled whole', (width, ctx) =>
    inPage(ctx, `#key=${encodeURIComponent(LONG_KEY)}`, async (page) => {
      await expect.poll(() => page.locator('#holders-body tr').count()).toBe(1);
      for (const [selector, id] of [
        ['#holders-body code.job-id', LONG_JOB],
        [`#keys-body tr[data-key="${LONG_KEY}"] a.key-link`, LONG_KEY],
        [`#workers-body li[data-job="${LONG_JOB}"] code.job-id`, LONG_JOB],
        [`#workers-body li[data-job="${LONG_JOB}"] a.key-link`, LONG_KEY],
      ] as const) {
        expect({ selector, ...(await drawn(page, selector)) }).toEqual({ selector, oneLine: true, cut: true, text: id, title: id, copied: id });
      }
      // The view's heading: one line, cut at the panel's edge (a phone's), the id whole in its text.
      expect(await drawn(page, '#key-heading')).toMatchObject({ oneLine: true, ...(width < 720 ? { cut: true } : {}) });
      expect(await page.locator('#key-title').textContent()).toBe(LONG_KEY);
    }, width));

  it('in Portuguese and Swedish: the more jobs a worker runs, singular and plural, and durations in their units', (ctx) =>
    inPage(ctx, '', async (page) => {
      const more = page.locator('#workers-body tr[data-worker="w-live"] .worker-jobs li.more');
      await expect.poll(() => more.count()).toBe(1);
      await page.selectOption('#language', 'pt');
      await expect.poll(() => more.textContent()).toBe('+4 outras');
      // Portuguese counts 0 as singular.
      expect(await page.locator('#workers-summary').textContent()).toBe('1 ativo · 0 sumido');
      await page.selectOption('#language', 'sv');
      await expect.poll(() => more.textContent()).toBe('+4 till');
      expect(await page.locator('#workers-summary').textContent()).toBe('1 aktiv · 0 borta');
      expect(await page.locator('#workers-body tr[data-worker="w-live"] td').nth(6).textContent()).toMatch(/^för \d+(,\d)? s sedan$/);
    }));
});

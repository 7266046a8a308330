import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Worker } from '../../src/adapters/worker/worker.js';
import { until } from '../support/until.js';
import { hasChromium, launchChromium, rememberToken, SKIP_NO_CHROMIUM, startTestServer, watchProblems, type TestServer } from './support.js';

// The operator's page in real headless Chromium (Debian's package), issue 12: who is working
// (the workers and queues, a killed worker's holders shown as nobody's), the failed and dead jobs
// retried from the page under the operator's own name (a named token), and a job's view saying
// why it waits, now and as of a past moment. One server, one browser, a live worker in this
// process and one in a process of its own that is killed with SIGKILL.

if (!hasChromium) console.warn(`\n*** ${SKIP_NO_CHROMIUM} ***\n`);

const ARTIFACTS = new URL('../../test-artifacts/', import.meta.url);
const ALICE = 'alice-token';
const BEAT_MS = 300;

let s: TestServer;
let browser: Browser;
let worker: Worker;
let doomed: ChildProcess;
let doomedId: string;
const problems: string[] = [];
/** Jobs whose first run failed: `send` fails once per job, so a retried job completes. */
const failedOnce = new Set<string>();

/** A worker in an OS process of its own (test/worker/presence-process.mjs, on the built library): its `hang` jobs run until it dies. */
const spawnWorker = async (queue: string): Promise<string> => {
  doomed = spawn(process.execPath, [new URL('../worker/presence-process.mjs', import.meta.url).pathname, JSON.stringify({ databaseUrl: s.db.url, queue, presenceIntervalMs: BEAT_MS })], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: doomed.stdout! }).once('line', resolve);
    doomed.once('exit', (code) => reject(new Error(`the worker process exited (${code}) before starting`)));
  });
  return (JSON.parse(line) as { workerId: string }).workerId;
};

beforeAll(async () => {
  if (!hasChromium) return;
  s = await startTestServer({ tokens: [{ name: 'alice', token: ALICE }] });
  worker = s.ledger.worker({
    queue: 'served',
    concurrency: 2,
    presenceIntervalMs: BEAT_MS,
    handlers: {
      send: async (_args, ctx) => {
        if (failedOnce.has(ctx.jobId)) return;
        failedOnce.add(ctx.jobId);
        throw new Error('smtp 550: mailbox full');
      },
    },
  });
  worker.start();
  doomedId = await spawnWorker('doomed');
  await s.ledger.enqueueMany([
    // Die at their first attempt (maxAttempts 1).
    { name: 'send', key: 'mail/out', limit: 2, queue: 'served', maxAttempts: 1, jobId: 'dead-1' },
    { name: 'send', key: 'mail/out', queue: 'served', maxAttempts: 1, jobId: 'dead-2' },
    // On a queue nobody reads: line-1 holds the slot unstarted, two wait behind it.
    { name: 'send', key: 'line', limit: 1, queue: 'nobody', jobId: 'line-1' },
    { name: 'send', key: 'line', queue: 'nobody', jobId: 'line-2' },
    { name: 'send', key: 'line', queue: 'nobody', jobId: 'line-3' },
    // Run, until its worker is killed, by the worker of the other process.
    { name: 'hang', key: 'doomed/k', limit: 1, queue: 'doomed', jobId: 'doomed-1' },
  ]);
  const status = async (jobId: string) => (await s.get('/api/jobs', { key: jobId.startsWith('dead') ? 'mail/out' : 'doomed/k' })).body.jobs.find((j: { jobId: string }) => j.jobId === jobId)?.status;
  await until(async () => [await status('dead-1'), await status('dead-2'), await status('doomed-1')], (v) => v.join() === 'dead,dead,running', 'two jobs dead and one running');
  browser = await launchChromium();
  mkdirSync(ARTIFACTS, { recursive: true });
});

afterAll(async () => {
  doomed?.kill('SIGKILL');
  await worker?.stop();
  await browser?.close();
  await s?.close();
});

const open = async (hash: string): Promise<Page> => {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  watchProblems(page, problems);
  await page.goto(`${s.url}/${hash}`);
  return page;
};

const noProblems = () => {
  expect(problems).toEqual([]);
  problems.length = 0;
};

const holderBadge = (page: Page, jobId: string) => page.locator(`#holders-body tr[data-job="${jobId}"] .badge`).first().textContent();

describe("the operator's page, in headless Chromium", () => {
  it("a killed worker's holder is shown as not running: running on the worker while it beats, worker gone once it is killed; the overview says so", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open('#key=doomed/k');
    await expect.poll(() => holderBadge(page, 'doomed-1')).toMatch(new RegExp(`^running on ${doomedId} \\(renewed .+ ago\\)$`));
    expect(await page.locator(`#workers-body tr[data-worker="${doomedId}"] td`).nth(1).textContent()).toBe('live');

    doomed.kill('SIGKILL');
    await expect.poll(() => holderBadge(page, 'doomed-1'), { timeout: 10_000 }).toMatch(new RegExp(`^worker gone: ${doomedId}, last seen .+ ago$`));
    expect(await page.locator('#keys-body tr[data-key="doomed/k"] td').nth(2).textContent()).toBe('worker gone');
    const gone = page.locator(`#workers-body tr[data-worker="${doomedId}"]`);
    expect(await gone.getAttribute('class')).toBe('gone');
    expect(await gone.locator('td').nth(1).textContent()).toBe('gone (silent)');
    // The totals: the held slots are not all running, and which are not is said.
    const holders = await page.locator('#card-holders').textContent();
    expect(holders).not.toContain('all running');
    expect(holders).toContain('1 whose worker is gone');
    expect(holders).toContain('1 admitted, not started');
    await expect.poll(() => page.locator('#warnings-list li[data-kind="holders-worker-gone"]').textContent()).toBe(
      'doomed/k: 1 holder whose worker is gone: nobody runs it until the sweeper reclaims its lease when it runs out.',
    );
    await page.close();
    noProblems();
  });

  it('the workers and queues: the live worker with its queue and concurrency, the gone one dimmed; a queue with messages and no live consumer flagged and warned of', async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open('');
    const live = page.locator(`#workers-body tr[data-worker="${worker.workerId}"]`);
    await expect.poll(() => live.count()).toBe(1);
    expect(await live.getAttribute('class')).toBeNull();
    const cells = await live.locator('td').allTextContents();
    expect(cells.slice(0, 5)).toEqual([worker.workerId, 'live', expect.stringMatching(new RegExp(`, pid ${process.pid}$`)), 'served', '2']);
    expect(cells[6]).toMatch(/ sec ago$/);
    await expect.poll(() => page.locator('#workers-summary').textContent(), { timeout: 10_000 }).toBe('1 live · 1 gone');
    expect(await page.locator('#card-workers').textContent()).toBe('1');
    expect(await page.locator('#card-workers-gone').textContent()).toBe('1 gone');

    const nobody = page.locator('#queues-body tr[data-queue="nobody"]');
    expect(await nobody.getAttribute('class')).toBe('alert');
    expect(await nobody.locator('td').allTextContents()).toEqual(['nobodyno live consumer', '1', '1', expect.stringMatching(/ sec$/), '0 workers (0 at once)']);
    const served = page.locator('#queues-body tr[data-queue="served"]');
    expect(await served.getAttribute('class')).toBeNull();
    expect(await served.locator('td').nth(4).textContent()).toBe('1 worker (2 at once)');
    // One warning for both queues nobody reads (doomed lost its worker above), each named with its depth.
    expect(await page.locator('#warnings-list li[data-kind="queue-without-consumer"]').allTextContents()).toEqual(['2 queues have messages and no live worker reading them: doomed (1), nobody (1)']);
    await page.screenshot({ path: new URL('page-operator.png', ARTIFACTS).pathname, fullPage: true });
    await page.close();
    noProblems();
  });

  it("dead jobs are listed with their error; retried from the page with alice's token: a toast, the job leaves the list, the ledger records JobRetried by alice", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open('');
    await rememberToken(page, ALICE);
    // The header names whose token the page holds, once the next refresh has asked the server.
    await expect.poll(() => page.locator('#who').textContent(), { timeout: 10_000 }).toBe('signed in as alice');
    const row = (jobId: string) => page.locator(`#dead-body tr[data-job="${jobId}"]`);
    await expect.poll(() => row('dead-2').count()).toBe(1);
    expect(await row('dead-1').locator('td').allTextContents()).toEqual(['', 'dead-1send', 'mail/outqueue served', 'dead', '1 / 1', 'smtp 550: mailbox full', expect.stringMatching(/^died .+ ago$/)]);
    expect(await page.locator('#dead-retry').isDisabled()).toBe(true);

    // "all shown" names both; cancelled, nothing is written.
    const before = await s.eventCount();
    await page.locator('#dead-all').check();
    await page.locator('#dead-retry').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await page.locator('#confirm-title').textContent()).toBe('Retry 2 dead jobs?');
    expect(await page.locator('#confirm-list li').allTextContents()).toEqual(['dead-2', 'dead-1']);
    expect(await page.locator('#confirm-text').textContent()).toContain('Each runs again with a fresh set of attempts, taking a free slot of its key or waiting at the back of its line.');
    await page.locator('#confirm-cancel').click();
    expect(await s.eventCount()).toBe(before);

    await page.locator('#dead-all').uncheck();
    await row('dead-1').locator('input.pick').check();
    expect(await page.locator('#dead-retry').textContent()).toBe('Retry 1');
    await page.locator('#dead-retry').click();
    await page.locator('#confirm[open]').waitFor();
    expect(await page.locator('#confirm-title').textContent()).toBe('Retry 1 dead job?');
    expect(await page.locator('#confirm-list li').allTextContents()).toEqual(['dead-1']);
    await page.locator('#confirm-ok').click();
    await expect.poll(() => page.locator('#toasts .toast.ok .toast-text').textContent()).toBe('Retried 1 job: 1 took a slot, 0 waits in line.');
    await expect.poll(() => row('dead-1').count()).toBe(0);
    expect(await row('dead-2').count()).toBe(1);
    const history = (await s.get('/api/jobs/history', { jobId: 'dead-1' })).body;
    expect(history.events.find((e: { type: string }) => e.type === 'JobRetried')).toMatchObject({ by: 'alice', via: 'http' });

    // Its own view shows who retried it, and that it then ran.
    await page.locator('#toasts .toast.ok .dismiss').click();
    await page.goto(`${s.url}/#job=dead-1`);
    // The worker runs it once it reads it (a wakeup, or its next poll) and the page shows it at its next refresh: seconds under load.
    await expect.poll(() => page.locator('#job-events li[data-type="JobCompleted"]').count(), { timeout: 10_000 }).toBe(1);
    expect(await page.locator('#job-events li[data-type="JobRetried"]').textContent()).toContain('by alice via http');
    expect(await page.locator('#job-events li[data-type="JobFailed"]').textContent()).toContain('smtp 550: mailbox full');

    // A filter: exact, on the server.
    await page.goto(`${s.url}/`);
    await expect.poll(() => row('dead-2').count()).toBe(1);
    await page.fill('#dead-filter-name', 'other');
    await page.press('#dead-filter-name', 'Enter');
    await expect.poll(() => page.locator('#dead-empty').textContent()).toBe('No failed or dead job matches the filter.');
    await page.close();
    noProblems();
  });

  it("a parked job's view says why it waits: its place, the holder ahead and its lease, the key full; as of before its enqueue it was not there", async (ctx) => {
    ctx.skip(!hasChromium, SKIP_NO_CHROMIUM);
    const page = await open('#key=line');
    await page.locator('#parked-body tr[data-job="line-3"] a.job-link').click();
    const line = page.locator('#job-limits li[data-key="line"]');
    await expect.poll(() => line.count()).toBe(1);
    expect(await page.locator('#job-summary .badge').textContent()).toBe('parked');
    expect(await line.locator('p').first().textContent()).toBe('Its key line: 1 of 1 slots held.full');
    expect(await line.locator('.place').textContent()).toBe('Place 2 of 2 in the line.');
    expect(await line.locator('.ahead').textContent()).toBe('1 job ahead of it: line-2');
    expect(await line.locator('.ahead a').getAttribute('href')).toBe('#job=line-2');
    expect(await line.locator('.holders-why li[data-job="line-1"]').textContent()).toMatch(/^line-1 admitted, not started for .+ sec$/);
    expect(await page.locator('#job-standing').textContent()).toContain('It is parked: it starts when every key below has a slot for it');
    expect(await page.locator('#job-waits li').textContent()).toMatch(/^parked .+ on line \(full\)$/);

    await page.fill('#job-at', '2001-01-01T00:00:00');
    await page.press('#job-at', 'Enter');
    await expect.poll(() => page.locator('#job-standing').textContent()).toBe('At that moment the job was not enqueued yet.');
    expect(await page.locator('#job-summary .badge').textContent()).toBe('not enqueued yet');
    expect(await page.locator('#job-limits li').count()).toBe(0);
    await page.locator('#job-at-now').click();
    await expect.poll(() => page.locator('#job-summary .badge').textContent()).toBe('parked');
    await page.screenshot({ path: new URL('page-job.png', ARTIFACTS).pathname, fullPage: true });
    await page.close();
    noProblems();
  });
});

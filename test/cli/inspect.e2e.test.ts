import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Audit } from '../../src/commands/audit.js';
import type { JobPage } from '../../src/adapters/postgres/queries/list-jobs.js';
import type { KeyRow } from '../../src/adapters/postgres/queries/list-keys.js';
import { expectRefused as expectRefusedBy, runCli } from '../support/cli.js';
import { SEC, openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';

// `jobledger keys`, `jobs` and `audit` as subprocesses, over a history scripted in-process on the
// same database with a clock set an hour back (so every recorded time is exact and in the past).

let s: ScriptedLedger;
/** A whole second an hour ago: the scripted history's time zero. */
const BASE = Math.floor(Date.now() / 1_000) * 1_000 - 3_600 * SEC;
const HOUR = 3_600 * SEC;

const jobledger = (...args: string[]) => runCli(s.db.url, args);

beforeAll(async () => {
  s = await openScriptedLedger();
  const { ledger } = s;
  // acme: a fails, b is promoted, runs and is revoked by alice; both come back due, a completes, b is promoted again.
  s.at(BASE);
  await ledger.enqueue({ name: 'sync', key: 'acme', limit: 1, leaseMs: HOUR, jobId: 'a' });
  s.at(BASE + SEC);
  await ledger.enqueue({ name: 'sync', key: 'acme', leaseMs: HOUR, jobId: 'b' });
  s.at(BASE + 2 * SEC);
  await s.start('acme', 'a', 'w1');
  s.at(BASE + 3 * SEC);
  await s.fail('acme', 'a', 'timeout');
  s.at(BASE + 4 * SEC);
  await s.start('acme', 'b', 'w2');
  s.at(BASE + 5 * SEC);
  await ledger.release({ key: 'acme', jobId: 'b', by: 'alice' });
  await s.stopped('acme', 'b');
  s.at(BASE + 1_800 * SEC);
  await s.run('acme', { type: 'AdmitDue' });
  await s.start('acme', 'a', 'w1');
  s.at(BASE + 1_801 * SEC);
  await s.complete('acme', 'a');
  // stale: its started holder's one-second lease ran out long ago (nobody swept it); quiet: nothing held.
  await ledger.enqueue({ name: 'sync', key: 'stale', leaseMs: SEC, jobId: 's1' });
  await s.start('stale', 's1');
  await ledger.enqueue({ name: 'sync', key: 'quiet', jobId: 'q1' });
  await s.start('quiet', 'q1');
  await s.complete('quiet', 'q1');
});

afterAll(async () => {
  await s?.close();
});

const expectRefused = (args: readonly string[], named: string) => expectRefusedBy(jobledger, () => s.eventCount(), args, named);

describe('jobledger keys', () => {
  it('--all --json: every key with limit, use, waits and lease state', async () => {
    const result = await jobledger('keys', '--all', '--json');
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout) as KeyRow[]).toEqual([
      // b, promoted by a's completion, holds the slot unstarted: no expiry until a worker starts it.
      { key: 'acme', limit: 1, inUse: 1, parked: 0, scheduled: 0, oldestParkedAt: null, nextLeaseExpiry: null, leaseState: 'unstarted', holderStates: { running: 0, unstarted: 1, expired: 0, workerGone: 0 }, oldestUnstartedAt: expect.any(Number), atLimit: true, quarantine: null, paused: null },
      { key: 'quiet', limit: 1, inUse: 0, parked: 0, scheduled: 0, oldestParkedAt: null, nextLeaseExpiry: null, leaseState: 'none', holderStates: { running: 0, unstarted: 0, expired: 0, workerGone: 0 }, oldestUnstartedAt: null, atLimit: false, quarantine: null, paused: null },
      { key: 'stale', limit: 1, inUse: 1, parked: 0, scheduled: 0, oldestParkedAt: null, nextLeaseExpiry: BASE + 1_802 * SEC, leaseState: 'expired', holderStates: { running: 0, unstarted: 0, expired: 1, workerGone: 0 }, oldestUnstartedAt: null, atLimit: true, quarantine: null, paused: null },
    ]);
  });

  it('a page by default, as the dashboard lists them: keys needing attention, then keys at their limit, first; --limit and --offset page on', async () => {
    const page = JSON.parse((await jobledger('keys', '--json')).stdout) as { order: unknown; matched: number; keys: KeyRow[] };
    expect(page.order).toEqual({ sort: 'attention', dir: 'asc', limit: 50, offset: 0 });
    expect(page.matched).toBe(3);
    // acme's holder waits unstarted too long and stale's lease ran out (both need attention: by key), quiet is neither.
    expect(page.keys.map((k) => [k.key, (k as KeyRow & { attention: string[] }).attention])).toEqual([['acme', ['holders-unstarted']], ['stale', ['holders-expired']], ['quiet', []]]);
    const second = await jobledger('keys', '--limit', '1', '--offset', '1');
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toContain('stale');
    expect(second.stdout).not.toContain('acme');
    expect(second.stdout).toContain('keys 2–2 of 3, by attention (asc); next: --offset 2');
    expect(JSON.parse((await jobledger('keys', '--match', 'QUI', '--json')).stdout).keys.map((k: KeyRow) => k.key)).toEqual(['quiet']);
  });

  it('bad page flags are refused naming the flag, and --all pages nothing', async () => {
    await expectRefused(['keys', '--limit', '0'], '--limit');
    await expectRefused(['keys', '--sort', 'size'], '--sort');
    await expectRefused(['keys', '--all', '--offset', '5'], '--offset');
  });

  it('a table by default', async () => {
    const { code, stdout } = await jobledger('keys');
    expect(code).toBe(0);
    const lines = stdout.split('\n');
    expect(lines.find((l) => l.includes('limit'))).toMatch(/key.*limit.*in use.*parked.*scheduled.*oldest wait.*lease/);
    expect(lines.find((l) => l.includes('stale'))).toMatch(/stale\s*│\s*1\s*│\s*1 \(full\)\s*│\s*0\s*│\s*0\s*│\s*│\s*expired/);
    expect(lines.find((l) => l.includes('quiet'))).toContain('none');
  });
});

describe('jobledger jobs', () => {
  it('--json: newest first, filtered by key and status, paged by cursor', async () => {
    const all = JSON.parse((await jobledger('jobs', '--json')).stdout) as JobPage;
    // s1 and q1 were enqueued at the same moment: job id breaks the tie, descending.
    expect(all.jobs.map((j) => j.jobId)).toEqual(['s1', 'q1', 'b', 'a']);
    expect(all.jobs.find((j) => j.jobId === 'a')).toMatchObject({ key: 'acme', status: 'completed', attempts: 2, lastError: 'timeout', workerId: 'w1', finishedAt: BASE + 1_801 * SEC });
    const acme = JSON.parse((await jobledger('jobs', '--key', 'acme', '--status', 'holding', '--json')).stdout) as JobPage;
    expect(acme.jobs.map((j) => j.jobId)).toEqual(['b']);
    const first = JSON.parse((await jobledger('jobs', '--limit', '3', '--json')).stdout) as JobPage;
    expect(first.jobs.map((j) => j.jobId)).toEqual(['s1', 'q1', 'b']);
    const rest = JSON.parse((await jobledger('jobs', '--limit', '3', '--cursor', first.nextCursor!, '--json')).stdout) as JobPage;
    expect(rest).toMatchObject({ jobs: [{ jobId: 'a' }], nextCursor: null });
  });

  it('a table by default, with how to get the next page', async () => {
    const { code, stdout } = await jobledger('jobs', '--limit', '1');
    expect(code).toBe(0);
    expect(stdout).toMatch(/job.*key.*name.*status.*attempts/);
    expect(stdout).toMatch(/s1\s*│\s*stale\s*│\s*sync\s*│\s*running\s*│\s*1\/5/);
    expect(stdout).toMatch(/more: --cursor \S+/);
  });

  it.each([
    [['--limit', '0'], '--limit'],
    [['--limit', 'many'], '--limit'],
    [['--status', 'sleeping'], '--status'],
    [['--key', ''], '--key'],
    [['--cursor', 'nope'], '--cursor'],
  ])('bad input %j exits 2 and names %s', async (flags, named) => {
    await expectRefused(['jobs', ...flags], named);
  });
});

describe('jobledger audit', () => {
  it('--key --json: the exact handoff sequence of the scripted run, with its events', async () => {
    const result = await jobledger('audit', '--key', 'acme', '--json');
    expect(result.code, result.stderr).toBe(0);
    const audit = JSON.parse(result.stdout) as Audit;
    const none = { key: 'acme', by: null, error: null } as const;
    expect(audit.handoffs).toEqual([
      { ...none, jobId: 'a', leaseId: 'a:1', how: 'acquired', parkedMs: null, acquiredAt: BASE, workerId: 'w1', startedAt: BASE + 2 * SEC, attempt: 1, releasedAt: BASE + 3 * SEC, reason: 'failed', error: 'timeout', acquiredRevision: 2, releasedRevision: 7 },
      { ...none, jobId: 'b', leaseId: 'b:2', how: 'promoted', parkedMs: 2 * SEC, acquiredAt: BASE + 3 * SEC, workerId: 'w2', startedAt: BASE + 4 * SEC, attempt: 1, releasedAt: BASE + 5 * SEC, reason: 'revoked', by: 'alice', acquiredRevision: 9, releasedRevision: 12 },
      { ...none, jobId: 'a', leaseId: 'a:3', how: 'acquired', parkedMs: null, acquiredAt: BASE + 1_800 * SEC, workerId: 'w1', startedAt: BASE + 1_800 * SEC, attempt: 2, releasedAt: BASE + 1_801 * SEC, reason: 'completed', acquiredRevision: 14, releasedRevision: 18 },
      { ...none, jobId: 'b', leaseId: 'b:4', how: 'promoted', parkedMs: SEC, acquiredAt: BASE + 1_801 * SEC, workerId: null, startedAt: null, attempt: null, releasedAt: null, reason: null, acquiredRevision: 19, releasedRevision: null },
    ]);
    expect(audit.events).toHaveLength(20);
    expect(audit.events[11]).toEqual({ stream: 'key:acme', revision: 11, type: 'LeaseRevoked', data: { jobId: 'b', leaseId: 'b:2', by: 'alice', at: BASE + 5 * SEC } });
  });

  it('a table by default: one row per handoff, how it got the slot, worker, when and why it was let go, attempt', async () => {
    const { code, stdout } = await jobledger('audit', '--key', 'acme');
    expect(code).toBe(0);
    const rows = stdout.split('\n').filter((l) => /│ [ab] /.test(l));
    expect(rows).toHaveLength(4);
    const iso = (t: number) => new Date(t).toISOString();
    expect(rows[0]).toMatch(new RegExp(`a\\s*│\\s*a:1\\s*│\\s*acquired\\s*│\\s*${iso(BASE)}\\s*│\\s*w1\\s*│\\s*1\\s*│\\s*${iso(BASE + 3 * SEC)}\\s*│\\s*failed: timeout`));
    expect(rows[1]).toMatch(/b\s*│\s*b:2\s*│\s*promoted after 2s parked\s*│.*│\s*w2\s*│\s*1\s*│.*│\s*revoked by alice/);
    expect(rows[2]).toMatch(/a\s*│\s*a:3\s*│\s*acquired\s*│.*│\s*w1\s*│\s*2\s*│.*│\s*completed/);
    expect(rows[3]).toMatch(/b\s*│\s*b:4\s*│\s*promoted after 1s parked\s*│.*│\s*held/);
  });

  it("--job: only that job's handoffs and events", async () => {
    const audit = JSON.parse((await jobledger('audit', '--job', 'b', '--json')).stdout) as Audit;
    expect(audit.handoffs.map((h) => `${h.leaseId} ${h.reason}`)).toEqual(['b:2 revoked', 'b:4 null']);
    expect(audit.events.every((e) => (e.data as { jobId?: string }).jobId === 'b')).toBe(true);
  });

  it.each([
    [[], '--key'],
    [['--key', 'acme', '--job', 'a'], '--key'],
    [['--key', ''], '--key'],
    [['--job', ' '], '--job'],
    [['--key', 'nobody'], 'nobody'],
    [['--job', 'nobody'], 'nobody'],
  ])('bad input %j exits 2 and names %s', async (flags, named) => {
    await expectRefused(['audit', ...flags], named);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Audit } from '../../src/commands/audit.js';
import { runCli } from '../support/cli.js';
import { SEC, openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';
import { until } from '../support/until.js';

// `jobledger audit` and `state` on a limit key (t) and on the homes of the jobs under it (a, b),
// over a history scripted in-process with a clock set an hour back.

let s: ScriptedLedger;
const BASE = Math.floor(Date.now() / 1_000) * 1_000 - 3_600 * SEC;
const iso = (t: number) => new Date(t).toISOString();

const jobledger = (...args: string[]) => runCli(s.db.url, args);
const json = async <T>(...args: string[]): Promise<T> => {
  const result = await jobledger(...args, '--json');
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as T;
};

beforeAll(async () => {
  s = await openScriptedLedger();
  const { ledger } = s;
  const underT = { limit: 1, limits: [{ key: 't', limit: 1 }] };
  s.at(BASE);
  await ledger.enqueue({ name: 'sync', key: 'a', jobId: 'j1', ...underT }); // holds a and t
  s.at(BASE + SEC);
  await ledger.enqueue({ name: 'sync', key: 'b', jobId: 'j2', ...underT }); // t is full: parks
  s.at(BASE + 2 * SEC);
  await s.start('a', 'j1', 'w1');
  s.at(BASE + 3 * SEC);
  await s.fail('a', 'j1', 'smtp down');
  // t's slot goes to j2, promoted on b by the writer's follow-up (b was not locked by the fail): before the clock moves on.
  await until(async () => (await ledger.keyState('b')).state.jobs.j2?.status, (status) => status === 'holding', 'j2 promoted on b');
  s.at(BASE + 4 * SEC);
  await ledger.enqueue({ name: 'sync', key: 'b', jobId: 'j3', ...underT }); // b and t are full: parks
});

afterAll(async () => {
  await s?.close();
});

describe('jobledger audit on a limit key', () => {
  it('--json: the jobs of other keys that held its slot, from which key, and why they let it go', async () => {
    const audit = await json<Audit>('audit', '--key', 't');
    expect(audit.handoffs).toEqual([
      expect.objectContaining({ key: 't', jobId: 'j1', leaseId: 'j1:1', home: 'a', limits: ['t'], how: 'acquired', acquiredAt: BASE, releasedAt: BASE + 3 * SEC, reason: 'failed' }),
      expect.objectContaining({ key: 't', jobId: 'j2', leaseId: 'j2:1', home: 'b', limits: ['t'], how: 'promoted', parkedMs: 2 * SEC, acquiredAt: BASE + 3 * SEC, releasedAt: null, reason: null }),
    ]);
    expect(audit.eventsInWords).toHaveLength(audit.events.length);
    expect(audit.eventsInWords).toContain('job j1 of key a let its slot of this key go (lease j1:1): failed');
    expect(audit.eventsInWords).toContain("job j3 of key b waits in this key's line (it is parked at home, under limits t)");
  });

  it('a table by default: a guest is "job j1 of key a", and its own key\'s audit is named for the rest', async () => {
    const { code, stdout } = await jobledger('audit', '--key', 't');
    expect(code).toBe(0);
    expect(stdout).toMatch(new RegExp(`job j1 of key a\\s*│\\s*j1:1\\s*│\\s*acquired\\s*│\\s*${iso(BASE)}\\s*│.*│\\s*${iso(BASE + 3 * SEC)}\\s*│\\s*failed`));
    expect(stdout).toMatch(/job j2 of key b\s*│\s*j2:1\s*│\s*promoted after 2s parked\s*│.*│\s*held/);
    expect(stdout).toContain('jobledger audit --key a, jobledger audit --key b');
  });

  it('--events: every event in words, after the handoffs', async () => {
    const { code, stdout } = await jobledger('audit', '--key', 't', '--events');
    expect(code).toBe(0);
    expect(stdout).toMatch(new RegExp(`1\\s*│\\s*${iso(BASE)}\\s*│\\s*job j1 of key a holds a slot of this key \\(lease j1:1, under limits t\\)`));
    expect(stdout).toMatch(/job j2 of key b holds a slot of this key \(lease j2:1, after 2 s waiting, under limits t\)/);
  });

  it("the home key's audit says which further limits the job held, with the who and what of its release", async () => {
    const audit = await json<Audit>('audit', '--key', 'a');
    expect(audit.handoffs).toEqual([expect.objectContaining({ key: 'a', jobId: 'j1', limits: ['t'], workerId: 'w1', attempt: 1, reason: 'failed', error: 'smtp down' })]);
    expect(audit.handoffs[0]).not.toHaveProperty('home');
    const { stdout } = await jobledger('audit', '--key', 'a');
    expect(stdout).toMatch(/j1\s*│\s*j1:1\s*│.*│\s*failed: smtp down\s*│\s*t\s*│/);
    expect(stdout.split('\n')[1]).toMatch(/also held/);
  });
});

describe('jobledger state on a limit key', () => {
  type View = { holders: Record<string, unknown>[]; parked: Record<string, unknown>[] };

  it('--json: its guests holding and parked, with their home and limits; now and at a past moment', async () => {
    const now = await json<View>('state', '--key', 't');
    expect(now.holders).toEqual([expect.objectContaining({ jobId: 'j2', home: 'b', limits: ['t'], leaseId: 'j2:1', attempts: null, workerId: null })]);
    expect(now.parked).toEqual([expect.objectContaining({ jobId: 'j3', home: 'b', limits: ['t'] })]);
    const then = await json<View>('state', '--key', 't', '--at', iso(BASE + 1.5 * SEC));
    expect(then.holders).toEqual([expect.objectContaining({ jobId: 'j1', home: 'a', leaseId: 'j1:1' })]);
    expect(then.parked).toEqual([expect.objectContaining({ jobId: 'j2', home: 'b' })]);
  });

  it('a home key: its own jobs (home null) with their further limits', async () => {
    const b = await json<View>('state', '--key', 'b');
    expect(b.holders).toEqual([expect.objectContaining({ jobId: 'j2', home: null, limits: ['t'], attempts: 0 })]);
    expect(b.parked).toEqual([expect.objectContaining({ jobId: 'j3', home: null, limits: ['t'] })]);
  });

  it('as text: guests named with their key; the other limits of a job in "also under"', async () => {
    const t = (await jobledger('state', '--key', 't')).stdout;
    expect(t).toContain('limit 1, 1 holding, 1 parked, 0 scheduled');
    expect(t).toContain("of them 1 holding and 1 parked are jobs of other keys under this key's limit");
    expect(t).toMatch(/job j2 of key b\s*│\s*j2:1/);
    expect(t).toMatch(/job j3 of key b\s*│\s*0\s*│/);
    expect(t).not.toContain('also under');
    const b = (await jobledger('state', '--key', 'b')).stdout;
    expect(b).toMatch(/holder.*also under/);
    expect(b).toMatch(/j3\s*│\s*0\s*│\s*\S+\s*│\s*t\s*│/);
    expect(b).not.toContain('other keys');
  });
});

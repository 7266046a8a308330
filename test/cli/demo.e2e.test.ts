import { randomBytes } from 'node:crypto';
import { chmod, mkdir, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEMO_KEYS } from '../../src/adapters/cli/commands/demo.js';
import { runCliWith } from '../support/cli.js';
import { postmasters } from '../support/postmasters.js';

// `jobledger demo` as the README's first command runs it: the built CLI with DATABASE_URL unset,
// on the embedded PostgreSQL in JOBLEDGER_HOME, twice on the same data folder.

// Under the OS temp dir, world-searchable: as root, postgres runs as user `postgres` and must reach it.
const base = join(tmpdir(), `jobledger-demo-e2e-${process.pid}-${randomBytes(4).toString('hex')}`);
const home = join(base, 'home');

afterAll(async () => {
  for (const pid of await postmasters(join(home, 'pg'))) process.kill(pid, 'SIGKILL');
  await rm(base, { recursive: true, force: true });
}, 60_000);

const demo = (...args: string[]) => runCliWith({ DATABASE_URL: undefined, JOBLEDGER_HOME: home, LOG_LEVEL: 'warn' }, ['demo', ...args]);

interface Handoff {
  jobId: string;
  key: string;
  how: string;
  workerId: string | null;
  attempt: number | null;
  reason: string | null;
}

describe('jobledger demo', () => {
  it('runs to completion on the embedded PostgreSQL, twice on the same folder, and prints the per-key summary and an audit', async () => {
    await mkdir(base, { recursive: true });
    await chmod(base, 0o755);

    const first = await demo();
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/^run \w+: 301 jobs over 12 keys in [\d.]+ s/);
    for (const { key, limit } of DEMO_KEYS) expect(first.stdout).toMatch(new RegExp(`│ ${key}\\s+│ \\d+\\s+│ [1-${limit}] / ${limit}\\s+│`));
    expect(first.stdout).toContain('it never exceeded the limit');
    expect(first.stdout).toMatch(/-crashed \(demo:tenant:acme\): started by worker-that-crashed, which went silent; the sweeper expired its lease/);
    expect(first.stdout).toMatch(/audit of demo:tenant:acme/);
    expect(first.stdout).toContain('lease expired: holder silent');
    expect(first.stderr).toContain('demo: 301/301 jobs'); // no terminal: plain progress lines
    expect(await postmasters(join(home, 'pg'))).toEqual([]); // the only user: it stopped the server

    const second = await demo('--json');
    expect(second.code, second.stderr).toBe(0);
    const result = JSON.parse(second.stdout) as {
      run: string;
      keys: { key: string; limit: number; jobs: number; largestOverlap: number; handoffs: number; retries: number; longestParkMs: number }[];
      crashed: Handoff[];
      scheduled: { handoffs: Handoff[] };
      audit: { key: string; handoffs: Handoff[] };
    };
    expect(result.run).not.toBe(/^run (\w+):/.exec(first.stdout)![1]); // a new run, with job ids of its own
    expect(result.keys.map((k) => [k.key, k.limit])).toEqual(DEMO_KEYS.map((k) => [k.key, k.limit]));
    expect(result.keys.reduce((n, k) => n + k.jobs, 0)).toBe(301);
    for (const k of result.keys) {
      expect(k.largestOverlap).toBeGreaterThanOrEqual(1);
      expect(k.largestOverlap).toBeLessThanOrEqual(k.limit);
      expect(k.handoffs).toBeGreaterThanOrEqual(k.jobs);
    }
    expect(result.keys.reduce((n, k) => n + k.retries, 0)).toBe(15); // 14 flaky jobs (every 23rd) and the crashed one run a second time
    expect(result.crashed.map((h) => [h.workerId, h.attempt, h.reason])).toEqual([
      ['worker-that-crashed', 1, 'expired'],
      [expect.stringMatching(/^(?!worker-that-crashed)/), 2, 'completed'],
    ]);
    expect(result.scheduled.handoffs).toMatchObject([{ attempt: 1, reason: 'completed' }]);
    expect(result.audit.key).toBe('demo:tenant:acme');
    expect(result.audit.handoffs.filter((h) => h.reason === 'failed').length).toBeGreaterThanOrEqual(1);
    expect(await postmasters(join(home, 'pg'))).toEqual([]);
    expect(await readdir(join(home, 'pg.users'))).toEqual([]);
  }, 150_000);
});

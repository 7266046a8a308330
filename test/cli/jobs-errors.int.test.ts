import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_WIDTH } from '../../src/adapters/cli/commands/jobs.js';
import { openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';
import { runCliInProcess } from './in-process.js';

// Regression (issue 25): `jobledger jobs --status dead` showed a dead job's reason ("failed; no
// attempt left (2/2)", which its attempts column says already) and not its error, which --json,
// explain and the page show. A dead or failed job's row now gives its last error, its first line
// cut to ERROR_WIDTH characters, so a stack trace or a long message keeps the row on one line.

let s: ScriptedLedger;

const LONG = `upstream said: ${'x'.repeat(200)}`;

beforeAll(async () => {
  s = await openScriptedLedger();
  const failing = async (jobId: string, maxAttempts: number, error: string) => {
    await s.ledger.enqueue({ name: 'send', key: `errors/${jobId}`, limit: 1, jobId, maxAttempts });
    await s.start(`errors/${jobId}`, jobId);
    await s.fail(`errors/${jobId}`, jobId, error);
  };
  await failing('dead-trace', 1, 'smtp 550: mailbox full\n    at send (mail.js:10:3)\n    at run (worker.js:2:1)');
  await failing('dead-long', 1, LONG);
  await failing('failed-once', 3, 'timeout after 30 s');
});

afterAll(async () => {
  await s?.close();
});

/** The table's row of `jobId`, its cells trimmed. */
const row = async (status: string, jobId: string): Promise<string[]> => {
  const { code, stdout, stderr } = await runCliInProcess(s.db.url, ['jobs', '--status', status]);
  expect(code, stderr).toBe(0);
  const line = stdout.split('\n').find((l) => l.includes(` ${jobId} `));
  expect(line, stdout).toBeDefined();
  return line!.split('│').map((cell) => cell.trim());
};

describe('jobs: the error of a dead or failed job in the table', () => {
  it("a dead job's error, its first line only (not the reason its attempts column says)", async () => {
    const cells = await row('dead', 'dead-trace');
    expect(cells).toContain('1/1');
    expect(cells.at(-2)).toBe('smtp 550: mailbox full');
  });

  it(`a long error is cut to ${ERROR_WIDTH} characters, ending in …`, async () => {
    const error = (await row('dead', 'dead-long')).at(-2)!;
    expect(error).toBe(`${LONG.slice(0, ERROR_WIDTH - 1)}…`);
  });

  it("a failed job's error, while it waits for its retry", async () => {
    expect((await row('failed', 'failed-once')).at(-2)).toBe('timeout after 30 s');
  });

  it('--json keeps the whole error and the reason', async () => {
    const { stdout } = await runCliInProcess(s.db.url, ['jobs', '--status', 'dead', '--json']);
    const job = (JSON.parse(stdout) as { jobs: { jobId: string; lastError: string; finishReason: string }[] }).jobs.find((j) => j.jobId === 'dead-trace')!;
    expect(job.lastError).toContain('at run (worker.js:2:1)');
    expect(job.finishReason).toMatch(/no attempt left/);
  });
});

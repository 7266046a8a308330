import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { registerDiscard } from '../../src/adapters/cli/commands/discard.js';
import { registerExplain } from '../../src/adapters/cli/commands/explain.js';
import { registerJob } from '../../src/adapters/cli/commands/job.js';
import { registerRetry } from '../../src/adapters/cli/commands/retry.js';
import { UsageError } from '../../src/adapters/cli/errors.js';
import { RefusedError } from '../../src/domain/errors.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';
import { runCommandsInProcess } from './in-process.js';

// `jobledger retry`, `discard --dead`, `explain` and `job`, registered on a program of their own
// and run in this process (runCommandsInProcess) against a scripted ledger's
// database: what each prints, and what each refuses with nothing written.

let s: ScriptedLedger;

beforeAll(async () => {
  s = await openScriptedLedger();
});

afterAll(async () => {
  await s?.close();
});

/** Runs `jobledger ...args` with these commands only; stdout as printed, and the error it ended with (if any). */
const jobledger = async (...args: string[]): Promise<{ stdout: string; error: unknown }> => {
  const { stdout, thrown } = await runCommandsInProcess(s.db.url, [registerRetry, registerDiscard, registerExplain, registerJob], args);
  return { stdout, error: thrown };
};

const dies = async (key: string, jobId: string) => {
  await s.ledger.enqueue({ name: 'work', key, limit: 1, jobId, maxAttempts: 1 });
  await s.start(key, jobId);
  await s.fail(key, jobId, 'disk full');
};

describe('jobledger retry and discard --dead', () => {
  it('retry --job: the dead job takes a free slot, recorded with --by', async () => {
    s.at(T0);
    await dies('cli-dead', 'c1');
    const { stdout, error } = await jobledger('retry', '--job', 'c1', '--by', 'erin');
    expect(error).toBeUndefined();
    expect(stdout).toBe('retried dead job c1 (by erin): took a free slot\n');
    expect((await s.ledger.jobHistory({ jobId: 'c1' })).events.at(-2)).toMatchObject({ type: 'JobRetried', by: 'erin', via: 'cli' });
  });

  it('retry --key K --dead and discard --key K --dead, as JSON', async () => {
    s.at(T0);
    await dies('cli-many', 'm1');
    await dies('cli-many', 'm2');
    const retried = await jobledger('retry', '--key', 'cli-many', '--dead', '--by', 'erin', '--json');
    expect(JSON.parse(retried.stdout).retried).toHaveLength(2);
    await dies('cli-gone', 'g1');
    const discarded = await jobledger('discard', '--key', 'cli-gone', '--dead', '--by', 'erin');
    expect(discarded.stdout).toBe('discarded dead job g1 (by erin)\n');
  });

  it.each([
    [['retry', '--key', 'cli-many'], '--dead'],
    [['retry'], '--job'],
    [['retry', '--job', 'x', '--key', 'k', '--dead'], '--job'],
    [['retry', '--job', ' '], '--job'],
    [['discard', '--dead'], '--job'],
    [['discard'], '--key'],
  ])('%j is a usage error naming %s, writing nothing', async (args, flag) => {
    const before = await s.eventCount();
    const { error } = await jobledger(...args);
    expect(error).toBeInstanceOf(UsageError);
    expect((error as Error).message.startsWith(flag)).toBe(true);
    expect(await s.eventCount()).toBe(before);
  });

  it('a job that is not dead is refused, naming it', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'cli-alive', jobId: 'alive' });
    const { error } = await jobledger('retry', '--job', 'alive');
    expect(error).toBeInstanceOf(RefusedError);
    expect((error as Error).message).toContain('job alive is holding, not dead');
  });
});

describe('jobledger explain and job', () => {
  it('explains a parked job in words, now and --at a past moment; job lists its events with who', async () => {
    s.at(T0);
    await s.ledger.enqueue({ name: 'work', key: 'cli-ex', limit: 1, jobId: 'x1' });
    s.at(T0 + SEC);
    await s.ledger.enqueue({ name: 'work', key: 'cli-ex', jobId: 'x2' });
    const now = await jobledger('explain', '--job', 'x2');
    expect(now.stdout).toContain('job x2 (key cli-ex) is parked, waiting for a slot');
    expect(now.stdout).toContain('its key cli-ex is full (1 of 1 slots held); it is 1 of 1 in line');
    expect(now.stdout).toContain('x1: admitted at 2026-11-30T03:00:00.000Z');
    const then = await jobledger('explain', '--job', 'x2', '--at', '2026-11-30T03:00:00.500Z', '--json');
    expect(JSON.parse(then.stdout)).toMatchObject({ status: 'unknown', asOf: T0 + 500 });
    const job = await jobledger('job', '--job', 'x2');
    expect(job.stdout).toContain('job x2 (key cli-ex): 2 events');
    expect(job.stdout).toContain('job x2 parked: no free slot for it');
    expect((await jobledger('explain', '--job', 'x2', '--at', 'noon')).error).toBeInstanceOf(UsageError);
  });
});

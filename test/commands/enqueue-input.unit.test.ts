import { describe, expect, it } from 'vitest';
import { planEnqueue, type EnqueueInput } from '../../src/commands/enqueue.js';
import { MIN_LEASE_MS, ValidationError } from '../../src/domain/values.js';

const NOW = Date.UTC(2026, 10, 30, 3, 0, 0);

const fieldOf = (input: unknown): string => {
  try {
    planEnqueue(input as EnqueueInput, NOW);
  } catch (e) {
    if (e instanceof ValidationError) return e.field;
    throw e;
  }
  throw new Error('accepted');
};

const cycle: Record<string, unknown> = { a: 1 };
cycle.self = cycle;

describe('enqueue input: a bad field is named', () => {
  it.each([
    ['an empty name', { name: '' }, 'name'],
    ['a blank name', { name: '   ' }, 'name'],
    ['a missing name', {}, 'name'],
    ['an empty key', { name: 'x', key: '' }, 'key'],
    ['a key that is not a string', { name: 'x', key: 7 }, 'key'],
    ['a zero limit', { name: 'x', key: 'k', limit: 0 }, 'limit'],
    ['a fractional limit', { name: 'x', key: 'k', limit: 1.5 }, 'limit'],
    ['a negative limit', { name: 'x', key: 'k', limit: -2 }, 'limit'],
    ['a limit given as a string', { name: 'x', key: 'k', limit: '3' }, 'limit'],
    ['a limit without a key', { name: 'x', limit: 2 }, 'limit'],
    ['a lease under the floor', { name: 'x', key: 'k', leaseMs: MIN_LEASE_MS - 1 }, 'leaseMs'],
    ['args holding a function', { name: 'x', args: { cb: () => 1 } }, 'args.cb'],
    ['args holding a BigInt', { name: 'x', args: { n: 10n } }, 'args.n'],
    ['args with a cycle', { name: 'x', args: cycle }, 'args.self'],
    ['args holding NaN', { name: 'x', args: [Number.NaN] }, 'args[0]'],
    ['args holding a class instance', { name: 'x', args: { when: new Map() } }, 'args.when'],
    ['a fractional priority', { name: 'x', priority: 0.5 }, 'priority'],
    ['a priority given as a string', { name: 'x', priority: 'high' }, 'priority'],
    ['an unparseable run time', { name: 'x', runAt: 'tomorrow-ish' }, 'runAt'],
    ['an invalid Date', { name: 'x', runAt: new Date('nope') }, 'runAt'],
    ['runAt and delayMs together', { name: 'x', runAt: NOW, delayMs: 5 }, 'delayMs'],
    ['a negative delay', { name: 'x', delayMs: -1 }, 'delayMs'],
    ['zero attempts', { name: 'x', maxAttempts: 0 }, 'maxAttempts'],
    ['a queue name with spaces', { name: 'x', queue: 'my queue' }, 'queue'],
    ['an empty job id', { name: 'x', jobId: '' }, 'jobId'],
  ])('%s', (_what, input, field) => {
    expect(fieldOf(input)).toBe(field);
  });

  it('the message says what is wrong', () => {
    expect(() => planEnqueue({ name: 'x', key: 'k', limit: 0 }, NOW)).toThrow('limit: must be an integer from 1 to 100000');
    expect(() => planEnqueue({ name: 'x', args: { n: 1n } }, NOW)).toThrow('args.n: is a bigint, which JSON cannot hold');
    expect(() => planEnqueue({ name: 'x', args: cycle }, NOW)).toThrow('args.self: refers back to itself');
  });

  it('in a batch the field carries the job index', () => {
    expect(() => planEnqueue({ name: 'x', limit: 0, key: 'k' }, NOW, 'jobs[3].')).toThrow('jobs[3].limit:');
  });
});

describe('enqueue input: defaults and conversions', () => {
  it('fills the defaults', () => {
    const p = planEnqueue({ name: 'sendEmail', key: 'user:1', jobId: 'j1' }, NOW);
    expect(p).toEqual({
      givenId: true,
      stream: 'key:user:1',
      key: 'user:1',
      limit: undefined,
      ownsLimit: false,
      leaseMs: undefined,
      job: { jobId: 'j1', name: 'sendEmail', args: null, queue: 'default', priority: 0, maxAttempts: 5, runAt: null },
    });
  });

  it('a job without a key has its own stream and limit 1', () => {
    const p = planEnqueue({ name: 'x', jobId: 'j1', leaseMs: 5_000 }, NOW);
    expect(p).toMatchObject({ stream: 'job:j1', key: null, limit: 1, leaseMs: 5_000 });
  });

  it('accepts a run time as a Date, ISO string or epoch ms, and a delay from now', () => {
    const at = NOW + 60_000;
    for (const runAt of [new Date(at), new Date(at).toISOString(), at]) {
      expect(planEnqueue({ name: 'x', runAt }, NOW).job.runAt).toBe(at);
    }
    expect(planEnqueue({ name: 'x', delayMs: 5_000 }, NOW).job.runAt).toBe(NOW + 5_000);
  });

  it('an undefined property in args is the same as an absent one', () => {
    expect(planEnqueue({ name: 'x', args: { a: 1, b: undefined } }, NOW).job.args).toEqual({ a: 1, b: undefined });
  });
});

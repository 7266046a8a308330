import { describe, expect, it } from 'vitest';
import type { Command } from '../../src/domain/commands.js';
import { mk } from '../../src/domain/events.js';
import { explain, type ExplainEvent } from '../../src/domain/explain.js';
import { explanationInWords } from '../../src/domain/explain-words.js';
import { fold, initialKeyState, type KeyState } from '../../src/domain/key-state.js';
import type { KeyEvent } from '../../src/domain/events.js';
import { givenAcross, limitHeld, limitReleased, limitWaiting } from './spec-across.js';
import { LEASE, SEC, T0, acquired, dead, enqueued, failed, job, limitSet, parked, paused, promoted, released, scheduled, started } from './spec.js';

// A dead job under further limits is retried across its limit keys in one decision, like any
// admission; and the explainer's answers, from states and events made by hand.

const HOME = 'key:tenant';
const API = 'key:api';
const under = job('a', { maxAttempts: 1, limits: [{ key: 'api' }] });
/** a (key tenant, under limit key api) ran once and died. */
const died = {
  [HOME]: [
    limitSet(2),
    enqueued(under),
    acquired('a', 'a:1'),
    started('a', 'a:1', T0 + SEC),
    failed('a', 'a:1', T0 + 2 * SEC, 1, 'boom', null),
    released('a', 'a:1', 'failed', T0 + 2 * SEC),
    dead('a', 'failed; no attempt left (1/1)', T0 + 2 * SEC),
  ],
  [API]: [limitSet(1), limitHeld('a', HOME, ['api'], 'a:1'), limitReleased('a', 'a:1', 'failed', T0 + 2 * SEC)],
};
const retry: Command = { type: 'RetryJob', jobId: 'a', by: 'alice', job: { queue: 'default', priority: 0, maxAttempts: 1, leaseMs: LEASE, limits: ['api'] } };
const retried = (at: number) => mk('JobRetried', { jobId: 'a', by: 'alice', queue: 'default', priority: 0, maxAttempts: 1, leaseMs: LEASE, limits: ['api'], at });

describe('RetryJob of a job under further limits', () => {
  it('takes a slot at home and on each limit key in one decision', () => {
    givenAcross(died)
      .when(retry, HOME, T0 + 9 * SEC)
      .then({
        [HOME]: [retried(T0 + 9 * SEC), acquired('a', 'a:2', T0 + 9 * SEC)],
        [API]: [limitHeld('a', HOME, ['api'], 'a:2', T0 + 9 * SEC)],
      });
  });

  it('waits in every line when a limit key is full: the limit is never exceeded', () => {
    const busy = { ...died, [API]: [...died[API], limitHeld('x', 'key:other', ['api'], 'x:1', T0 + 3 * SEC)] };
    const step = givenAcross(busy).when(retry, HOME, T0 + 9 * SEC);
    step.then({
      [HOME]: [retried(T0 + 9 * SEC), parked('a', T0 + 9 * SEC)],
      [API]: [limitWaiting('a', HOME, ['api'], 0, T0 + 9 * SEC)],
    });
    expect(step.states().get(API)!.holding).toBe(1);
  });
});

// ---------------------------------------------------------------------------------------------
// The explainer

const streamOf = (stream: string, events: readonly KeyEvent[], startedAt: Record<string, number> = {}) => ({
  stream,
  state: fold(initialKeyState, events) as KeyState,
  startedAt: new Map(Object.entries(startedAt)),
});

/** The job's events of a stream as the loader gives them: a JobParked/LimitWaiting with the key as it stood before it. */
const jobEvents = (stream: string, events: readonly KeyEvent[], jobId: string): ExplainEvent[] =>
  events.flatMap((event, i) => {
    if (!('jobId' in event.data) || event.data.jobId !== jobId) return [];
    const before = fold(initialKeyState, events.slice(0, i));
    const waits = event.type === 'JobParked' || event.type === 'LimitWaiting';
    return [{ stream, event, ...(waits ? { line: { limit: before.limit, holding: before.holding, paused: before.paused !== undefined } } : {}) }];
  });

describe('explain', () => {
  const key = [limitSet(1), enqueued(job('h')), acquired('h', 'h:1'), started('h', 'h:1', T0 + SEC), enqueued(job('p', { priority: -1 })), parked('p', T0 + 2 * SEC), enqueued(job('w')), parked('w', T0 + 3 * SEC)];

  it('a parked job: its place in line, the key it waits on and the holder ahead with its lease', () => {
    const x = explain({ jobId: 'w', asOf: T0 + 10 * SEC, home: streamOf(HOME, key, { 'h:1': T0 + SEC }), limits: [], events: jobEvents(HOME, key, 'w') });
    expect(x).toMatchObject({
      status: 'parked',
      limits: [{ key: 'tenant', own: true, limit: 1, holding: 1, blocking: true, place: { n: 2, of: 2 }, ahead: ['p'], holders: [{ jobId: 'h', home: null, lease: { state: 'running', workerId: 'w1', startedAt: T0 + SEC, expiresAt: T0 + SEC + LEASE } }] }],
      waits: [{ kind: 'parked', from: T0 + 3 * SEC, until: null, ms: 7 * SEC, on: [{ key: 'tenant', why: 'full' }] }],
    });
    expect(explanationInWords(x)).toContain('it is 2 of 2 in line (ahead: p)');
    expect(explanationInWords(x)).toContain('running on worker w1');
  });

  it('a holder nobody started, and one whose lease ran out', () => {
    const unstarted = [limitSet(1), enqueued(job('h')), acquired('h', 'h:1', T0)];
    expect(explain({ jobId: 'h', asOf: T0 + 5 * SEC, home: streamOf(HOME, unstarted), limits: [], events: jobEvents(HOME, unstarted, 'h') }).holding)
      .toMatchObject({ how: 'acquired', lease: { state: 'unstarted', heldSince: T0 } });
    const silent = [...unstarted, started('h', 'h:1', T0 + SEC)];
    expect(explain({ jobId: 'h', asOf: T0 + SEC + LEASE + 1, home: streamOf(HOME, silent), limits: [], events: jobEvents(HOME, silent, 'h') }))
      .toMatchObject({ status: 'running', holding: { lease: { state: 'expired' } } });
  });

  it("explaining now: a started lease whose worker no longer beats is worker-gone, one whose worker beats is running", () => {
    const now = { jobId: 'w', asOf: T0 + 10 * SEC, home: streamOf(HOME, key, { 'h:1': T0 + SEC }), limits: [], events: jobEvents(HOME, key, 'w') };
    const gone = explain({ ...now, liveWorkers: new Set(['w2']) });
    expect(gone.limits[0]!.holders).toMatchObject([{ jobId: 'h', lease: { state: 'worker-gone', workerId: 'w1' } }]);
    expect(explanationInWords(gone)).toContain('started by worker w1, which no longer beats');
    expect(explain({ ...now, liveWorkers: new Set(['w1']) }).limits[0]!.holders).toMatchObject([{ lease: { state: 'running' } }]);
    // An expired lease is expired whoever beats; an unstarted one has no worker to ask about.
    const silent = [limitSet(1), enqueued(job('h')), acquired('h', 'h:1', T0), started('h', 'h:1', T0 + SEC)];
    expect(explain({ jobId: 'h', asOf: T0 + SEC + LEASE + 1, liveWorkers: new Set(), home: streamOf(HOME, silent), limits: [], events: jobEvents(HOME, silent, 'h') }).holding).toMatchObject({ lease: { state: 'expired' } });
  });

  it('a paused key: the pause is what it waits on', () => {
    const stopped = [limitSet(2), paused('ops', 'vendor outage', T0), enqueued(job('w')), parked('w', T0 + SEC)];
    const x = explain({ jobId: 'w', asOf: T0 + 2 * SEC, home: streamOf(HOME, stopped), limits: [], events: jobEvents(HOME, stopped, 'w') });
    expect(x.limits[0]).toMatchObject({ blocking: true, paused: { by: 'ops', reason: 'vendor outage', since: T0 } });
    expect(x.waits).toMatchObject([{ on: [{ key: 'tenant', why: 'paused' }] }]);
    expect(explanationInWords(x)).toContain('its key tenant is paused by ops (vendor outage) since');
  });

  it('a job under a further limit waits on the limit key that is full, with its holders', () => {
    const home = [limitSet(2), enqueued(under), parked('a', T0 + SEC)];
    const api = [limitSet(1), limitHeld('x', 'key:other', ['api'], 'x:1', T0), limitWaiting('a', HOME, ['api'], 0, T0 + SEC)];
    const x = explain({ jobId: 'a', asOf: T0 + 4 * SEC, home: streamOf(HOME, home), limits: [streamOf(API, api)], events: [...jobEvents(HOME, home, 'a'), ...jobEvents(API, api, 'a')] });
    expect(x.limits.map((l) => [l.key, l.blocking])).toEqual([['tenant', false], ['api', true]]);
    expect(x.limits[1]!.holders).toMatchObject([{ jobId: 'x', home: 'other', lease: { state: 'home' } }]);
    expect(x.waits).toMatchObject([{ kind: 'parked', on: [{ key: 'api', why: 'full' }] }]);
    expect(explanationInWords(x)).toContain('it waits on api');
    // Regression: "its key tenant is has a free slot" (the verb was said twice).
    expect(explanationInWords(x)).toContain('its key tenant has a free slot (0 of 2 held)');
    expect(explanationInWords(x)).toContain('its limit key api is full (1 of 1 slots held)');
  });

  it('a scheduled retry: when, and the error of the attempt that failed', () => {
    const retrying = [limitSet(1), enqueued(job('r')), acquired('r', 'r:1'), started('r', 'r:1', T0), failed('r', 'r:1', T0 + SEC, 1, 'timeout', T0 + 5 * SEC), released('r', 'r:1', 'failed', T0 + SEC), scheduled('r', T0 + 5 * SEC, T0 + SEC)];
    const x = explain({ jobId: 'r', asOf: T0 + 2 * SEC, home: streamOf(HOME, retrying), limits: [], events: jobEvents(HOME, retrying, 'r') });
    expect(x).toMatchObject({ status: 'scheduled', attempts: 1, schedule: { runAt: T0 + 5 * SEC, due: false, why: 'retry after attempt 1 failed: timeout', because: { kind: 'failed', attempt: 1, error: 'timeout' } } });
  });

  it('a finished job: how it ended and how long it waited for what', () => {
    const life = [...key, released('h', 'h:1', 'completed', T0 + 6 * SEC), promoted('p', 'p:2', T0 + 6 * SEC, 4 * SEC)];
    const done = [...life, started('p', 'p:2', T0 + 6 * SEC), failed('p', 'p:2', T0 + 7 * SEC, 1, 'boom', null), released('p', 'p:2', 'failed', T0 + 7 * SEC), dead('p', 'failed; no attempt left (3/3)', T0 + 7 * SEC)];
    const x = explain({ jobId: 'p', asOf: T0 + 20 * SEC, home: streamOf(HOME, done), limits: [], events: jobEvents(HOME, done, 'p') });
    expect(x).toMatchObject({
      status: 'dead',
      ended: { at: T0 + 7 * SEC, reason: 'failed; no attempt left (3/3)', lastError: 'boom' },
      waits: [{ kind: 'parked', from: T0 + 2 * SEC, until: T0 + 6 * SEC, ms: 4 * SEC, on: [{ key: 'tenant', why: 'full' }] }],
      waited: { parkedMs: 4 * SEC, scheduledMs: 0 },
    });
    expect(explanationInWords(x)).toMatch(/is dead at .*: failed; no attempt left/);
  });

  it('a job not enqueued yet at that moment', () => {
    expect(explain({ jobId: 'zz', asOf: T0, home: streamOf(HOME, key), limits: [], events: [] }).status).toBe('unknown');
  });
});

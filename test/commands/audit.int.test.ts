import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Handoff } from '../../src/domain/audit.js';
import { UnknownJobError, UnknownKeyError } from '../../src/domain/errors.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';

// audit() reads the ledger itself: a scripted run on a real ledger, then its handoffs and events.

let s: ScriptedLedger;

beforeAll(async () => {
  s = await openScriptedLedger();
  const { ledger } = s;
  s.at(T0);
  await ledger.enqueue({ name: 'sync', key: 'acme', limit: 1, maxAttempts: 2, jobId: 'a' });
  s.at(T0 + SEC);
  await ledger.enqueue({ name: 'sync', key: 'acme', jobId: 'b' });
  s.at(T0 + 2 * SEC);
  await s.start('acme', 'a', 'w1');
  s.at(T0 + 3 * SEC);
  await s.fail('acme', 'a', 'timeout'); // b is promoted after 2 s parked; a is retried later
  s.at(T0 + 4 * SEC);
  await s.start('acme', 'b', 'w2');
  s.at(T0 + 5 * SEC);
  await ledger.release({ key: 'acme', jobId: 'b', by: 'alice' }); // b started: its handler is told to stop
  await s.stopped('acme', 'b'); // its worker says it stopped: the slot goes, b is retried later
  s.at(T0 + 3_600 * SEC);
  await s.run('acme', { type: 'AdmitDue' }); // a and b are due: a takes the slot, b parks
  await s.start('acme', 'a', 'w1');
  s.at(T0 + 3_601 * SEC);
  await s.complete('acme', 'a'); // b is promoted
  await ledger.enqueue({ name: 'solo', jobId: 'u' });
});

afterAll(async () => {
  await s?.close();
});

const base = { key: 'acme', attempt: null, parkedMs: null, workerId: null, startedAt: null, by: null, error: null } as const;

describe('audit()', () => {
  it('a key: one row per handoff, in order, with how, who, when and why', async () => {
    const { handoffs, events } = await s.ledger.audit({ key: 'acme' });
    expect(handoffs).toEqual<Handoff[]>([
      { ...base, jobId: 'a', leaseId: 'a:1', how: 'acquired', acquiredAt: T0, attempt: 1, workerId: 'w1', startedAt: T0 + 2 * SEC, releasedAt: T0 + 3 * SEC, reason: 'failed', error: 'timeout', acquiredRevision: 2, releasedRevision: 7 },
      { ...base, jobId: 'b', leaseId: 'b:2', how: 'promoted', parkedMs: 2 * SEC, acquiredAt: T0 + 3 * SEC, attempt: 1, workerId: 'w2', startedAt: T0 + 4 * SEC, releasedAt: T0 + 5 * SEC, reason: 'revoked', by: 'alice', acquiredRevision: 9, releasedRevision: 12 },
      { ...base, jobId: 'a', leaseId: 'a:3', how: 'acquired', acquiredAt: T0 + 3_600 * SEC, attempt: 2, workerId: 'w1', startedAt: T0 + 3_600 * SEC, releasedAt: T0 + 3_601 * SEC, reason: 'completed', acquiredRevision: 14, releasedRevision: 18 },
      { ...base, jobId: 'b', leaseId: 'b:4', how: 'promoted', parkedMs: SEC, acquiredAt: T0 + 3_601 * SEC, reason: null, releasedAt: null, acquiredRevision: 19, releasedRevision: null },
    ]);
    expect(events.map((e) => e.revision)).toEqual(events.map((_, i) => i));
    expect(events.map((e) => e.type)).toEqual([
      'KeyLimitSet', 'JobEnqueued', 'SlotAcquired', 'JobEnqueued', 'JobParked', 'JobStarted',
      'JobFailed', 'SlotReleased', 'JobScheduled', 'JobPromoted', 'JobStarted',
      'LeaseRevoked', 'SlotReleased', 'JobScheduled', 'SlotAcquired', 'JobParked', 'JobStarted',
      'JobCompleted', 'SlotReleased', 'JobPromoted',
    ]);
    expect(events[11]).toEqual({ stream: 'key:acme', revision: 11, type: 'LeaseRevoked', data: { jobId: 'b', leaseId: 'b:2', by: 'alice', at: T0 + 5 * SEC } });
  });

  it("a job: only its handoffs and events, found through the jobs read model", async () => {
    const { handoffs, events } = await s.ledger.audit({ jobId: 'b' });
    expect(handoffs.map((h) => h.leaseId)).toEqual(['b:2', 'b:4']);
    expect(events.map((e) => `${e.revision} ${e.type}`)).toEqual([
      '3 JobEnqueued', '4 JobParked', '9 JobPromoted', '10 JobStarted', '11 LeaseRevoked', '12 SlotReleased', '13 JobScheduled', '15 JobParked', '19 JobPromoted',
    ]);
  });

  it('a job without a key: its own stream', async () => {
    const { handoffs, events } = await s.ledger.audit({ jobId: 'u' });
    expect(handoffs).toMatchObject([{ key: 'job:u', jobId: 'u', how: 'acquired', reason: null }]);
    expect(events.every((e) => e.stream === 'job:u')).toBe(true);
  });

  it('an undefined field counts as absent', async () => {
    expect(await s.ledger.audit({ key: 'acme', jobId: undefined } as never)).toEqual(await s.ledger.audit({ key: 'acme' }));
  });

  it('an unknown key or job is named as such', async () => {
    await expect(s.ledger.audit({ key: 'nobody' })).rejects.toThrow(UnknownKeyError);
    await expect(s.ledger.audit({ jobId: 'nobody' })).rejects.toThrow(UnknownJobError);
  });

  it.each([
    [{ key: '' }, 'key'],
    [{ jobId: ' ' }, 'jobId'],
    [{ key: 7 }, 'key'],
    [{}, 'key'],
    [{ key: 'acme', jobId: 'a' }, 'jobId'],
  ])('bad target %j is a ValidationError naming %s', async (target, field) => {
    await expect(s.ledger.audit(target as never)).rejects.toMatchObject({ name: 'ValidationError', field });
  });
});

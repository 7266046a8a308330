import { describe, expect, it } from 'vitest';
import { mk, type EventOf, type KeyEvent, type KeyEventType } from '../../src/domain/events.js';
import { LEASE_LOST_CHANNEL, createDispatcher, projectDispatch } from '../../src/projections/dispatcher.js';
import { isLedgerStream, keyOfStream, type ProjectedEvent, type Statement } from '../../src/projections/projection.js';
import { createReadModelProjections, projectReadModels } from '../../src/projections/read-models.js';

const at = Date.UTC(2030, 0, 1);

/** One event of every type, as the decider would emit them for job j1 on key k. */
const samples: { [T in KeyEventType]: EventOf<T> } = {
  KeyLimitSet: mk('KeyLimitSet', { limit: 2, leaseMs: 30_000, by: null, at }),
  JobEnqueued: mk('JobEnqueued', { jobId: 'j1', name: 'email', args: { to: ['a'] }, queue: 'mail', priority: -1, maxAttempts: 3, leaseMs: 10_000, runAt: null, at }),
  SlotAcquired: mk('SlotAcquired', { jobId: 'j1', leaseId: 'j1:1', expiresAt: at + 10_000, at }),
  JobParked: mk('JobParked', { jobId: 'j1', at }),
  JobPromoted: mk('JobPromoted', { jobId: 'j1', leaseId: 'j1:2', expiresAt: at + 10_000, waitedMs: 5, at }),
  JobScheduled: mk('JobScheduled', { jobId: 'j1', runAt: at + 60_000, at }),
  JobStarted: mk('JobStarted', { jobId: 'j1', leaseId: 'j1:1', workerId: 'w1', attempt: 1, expiresAt: at + 10_000, at }),
  LeaseRenewed: mk('LeaseRenewed', { jobId: 'j1', leaseId: 'j1:1', expiresAt: at + 20_000, at }),
  JobCompleted: mk('JobCompleted', { jobId: 'j1', leaseId: 'j1:1', at }),
  JobFailed: mk('JobFailed', { jobId: 'j1', leaseId: 'j1:1', attempt: 1, error: 'boom', retryAt: at + 1_000, at }),
  JobDead: mk('JobDead', { jobId: 'j1', reason: 'no attempt left', at }),
  LeaseExpired: mk('LeaseExpired', { jobId: 'j1', leaseId: 'j1:1', expiresAt: at, at }),
  LeaseRevoked: mk('LeaseRevoked', { jobId: 'j1', leaseId: 'j1:1', by: 'ops', at }),
  SlotReleased: mk('SlotReleased', { jobId: 'j1', leaseId: 'j1:1', reason: 'completed', at }),
  JobYielded: mk('JobYielded', { jobId: 'j1', leaseId: 'j1:1', at }),
  JobCancelled: mk('JobCancelled', { jobId: 'j1', by: 'ops', at }),
  ParkedDiscarded: mk('ParkedDiscarded', { jobId: 'j1', by: 'ops', at }),
};

const on = (event: KeyEvent, stream = 'key:k', revision = 7): ProjectedEvent => ({
  event,
  stream,
  revision,
  position: { commit: 10n, prepare: 20n },
  key: keyOfStream(stream),
});

/** The $n a statement refers to are exactly 1..values.length: no value unbound, none unused. */
const expectParametersBound = (s: Statement) => {
  const used = new Set([...s.text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
  expect([...used].sort((a, b) => a - b)).toEqual(s.values.map((_, i) => i + 1));
};

describe.each([
  ['read models', projectReadModels],
  ['dispatcher', projectDispatch],
])('%s mapping', (_, project) => {
  it.each(Object.keys(samples) as KeyEventType[])('%s: pure, every parameter bound, on keyed and unkeyed streams', (type) => {
    for (const stream of ['key:k', 'job:j1']) {
      const statements = project(on(samples[type], stream));
      expect(project(on(samples[type], stream))).toEqual(statements);
      statements.forEach(expectParametersBound);
      // Values are what pg sends as is: no objects that it would turn into arrays or [object Object].
      for (const s of statements) for (const v of s.values) expect(v === null || ['string', 'number', 'boolean'].includes(typeof v)).toBe(true);
    }
  });
});

describe('read models', () => {
  it('JobEnqueued inserts the job as pending, its enqueue order being the event revision, args as JSON', () => {
    const [s, ...rest] = projectReadModels(on(samples.JobEnqueued, 'key:k', 12));
    expect(rest).toEqual([]);
    expect(s!.text).toMatch(/INSERT INTO jl_jobs/);
    expect(s!.text).toMatch(/'pending'/);
    expect(s!.values).toEqual(['j1', 'key:k', 'k', 12, 'email', 'mail', '{"to":["a"]}', -1, 3, 10_000, at]);
  });

  it('a job without a key: key null, no jl_keys row for its limit-1 stream', () => {
    expect(projectReadModels(on(samples.JobEnqueued, 'job:j1', 1))[0]!.values.slice(0, 3)).toEqual(['j1', 'job:j1', null]);
    expect(projectReadModels(on(samples.KeyLimitSet, 'job:j1', 0))).toEqual([]);
    expect(projectReadModels(on(samples.KeyLimitSet, 'key:k', 0))[0]!.values).toEqual(['key:k', 'k', 2, 30_000, at]);
  });

  it('an admission takes the job out of jl_parked, marks it holding and inserts its slot, saying how', () => {
    const [acquired] = projectReadModels(on(samples.SlotAcquired));
    const [promoted] = projectReadModels(on(samples.JobPromoted));
    for (const s of [acquired!, promoted!]) {
      expect(s.text).toMatch(/DELETE FROM jl_parked/);
      expect(s.text).toMatch(/status = 'holding'/);
      expect(s.text).toMatch(/INSERT INTO jl_slots/);
    }
    expect(acquired!.values.at(-1)).toBe('acquired');
    expect(promoted!.values.at(-1)).toBe('promoted');
  });

  it('a parked job takes its priority and enqueue order from jl_jobs (INSERT ... SELECT, no query of its own)', () => {
    const [s] = projectReadModels(on(samples.JobParked));
    expect(s!.text).toMatch(/INSERT INTO jl_parked[\s\S]*SELECT job_id, stream, key, priority, seq/);
  });

  it('finishing events set the status and leave jl_parked; the slot goes only with SlotReleased', () => {
    const finishes = { JobCompleted: ['completed', null], JobDead: ['dead', 'no attempt left'], JobCancelled: ['cancelled', 'cancelled by ops'], ParkedDiscarded: ['discarded', 'discarded by ops'] } as const;
    for (const [type, [status, reason]] of Object.entries(finishes)) {
      const [s, ...rest] = projectReadModels(on(samples[type as keyof typeof finishes]));
      expect(rest).toEqual([]);
      expect(s!.values).toEqual(['j1', status, reason, at]);
      expect(s!.text).not.toMatch(/jl_slots/);
    }
    const [released] = projectReadModels(on(samples.SlotReleased));
    expect(released!.text).toMatch(/DELETE FROM jl_slots/);
    expect(released!.text).toMatch(/THEN 'pending' ELSE status END/);
  });

  it('LeaseExpired and LeaseRevoked change nothing by themselves (their SlotReleased does)', () => {
    expect(projectReadModels(on(samples.LeaseExpired))).toEqual([]);
    expect(projectReadModels(on(samples.LeaseRevoked))).toEqual([]);
  });

  it('is rebuildable, over the four jl_ tables, for key and job streams only', () => {
    const p = createReadModelProjections();
    expect(p.rebuild?.tables).toEqual(['jl_jobs', 'jl_slots', 'jl_parked', 'jl_keys']);
    expect(['key:a', 'job:b', 'queue:c', 'other'].map(p.handles)).toEqual([true, true, false, false]);
  });
});

describe('dispatcher', () => {
  it('each admission is one statement returning its message, which must exist', () => {
    for (const type of ['SlotAcquired', 'JobPromoted'] as const) {
      const [s, ...rest] = projectDispatch(on(samples[type]));
      expect(rest).toEqual([]);
      expect(s).toMatchObject({ emits: 'messages', expectRows: 1, values: ['j1', samples[type].data.leaseId] });
      expect(s!.text).toMatch(/'attempt', attempts \+ 1/);
      expect(s!.text).toMatch(/FROM dispatch_jobs/);
      expect(s!.text).not.toMatch(/jl_/); // never the read models
    }
  });

  it('keeps dispatch_jobs: insert on enqueue, attempts on start and yield, delete when finished', () => {
    expect(projectDispatch(on(samples.JobEnqueued))[0]!.values).toEqual(['j1', 'key:k', 'k', 'mail', 'email', '{"to":["a"]}']);
    expect(projectDispatch(on(samples.JobStarted))[0]!.values).toEqual(['j1', 1, 'j1:1']);
    expect(projectDispatch(on(samples.JobYielded))[0]!.text).toMatch(/attempts - 1[\s\S]*started_lease_id = \$2/);
    for (const type of ['JobCompleted', 'JobDead', 'JobCancelled', 'ParkedDiscarded'] as const) {
      expect(projectDispatch(on(samples[type]))).toEqual([{ text: 'DELETE FROM dispatch_jobs WHERE job_id = $1', values: ['j1'] }]);
    }
    for (const type of ['KeyLimitSet', 'JobParked', 'JobScheduled', 'LeaseRenewed', 'JobFailed', 'SlotReleased'] as const) {
      expect(projectDispatch(on(samples[type]))).toEqual([]);
    }
  });

  it('announces a lease taken from its holder (revoked, expired) on the lease-lost channel, with the lease id', () => {
    for (const type of ['LeaseExpired', 'LeaseRevoked'] as const) {
      expect(projectDispatch(on(samples[type]))).toEqual([{ text: `SELECT pg_notify('${LEASE_LOST_CHANNEL}', $1)`, values: ['j1:1'] }]);
    }
  });

  it('is never rebuildable', () => {
    expect(createDispatcher().rebuild).toBeUndefined();
  });

  it('sends no message for an admission started in the same append (direct handoff), and one otherwise', () => {
    const promotion = on(samples.JobPromoted);
    const startedSameAppend = on(mk('JobStarted', { ...samples.JobStarted.data, leaseId: 'j1:2' }), 'key:k', 8);
    const startedLater = { ...startedSameAppend, position: { commit: 11n, prepare: 21n } };
    const dispatcher = createDispatcher();
    expect(dispatcher.forBatch!([promotion, startedSameAppend])(promotion)).toEqual([]);
    expect(dispatcher.forBatch!([promotion, startedLater])(promotion)).toEqual(projectDispatch(promotion));
    expect(dispatcher.forBatch!([promotion])(promotion)).toEqual(projectDispatch(promotion));
  });
});

describe('streams', () => {
  it('key of a stream', () => {
    expect(keyOfStream('key:a:b')).toBe('a:b');
    expect(keyOfStream('job:x')).toBeNull();
    expect(isLedgerStream('key:')).toBe(true);
    expect(isLedgerStream('snapshots')).toBe(false);
  });
});

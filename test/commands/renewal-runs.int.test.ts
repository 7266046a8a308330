import fc from 'fast-check';
import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobStreamOf } from '../../src/adapters/postgres/queries/job-stream.js';
import { jobHistory, type AuditDeps } from '../../src/commands/audit.js';
import { foldedJobEvents } from '../../src/commands/job-events.js';
import { fold, initialKeyState } from '../../src/domain/key-state.js';
import type { EventStore } from '../../src/domain/ports/event-store.js';
import { decodeRecorded } from '../../src/domain/recorded.js';
import { jobStream, keyStream } from '../../src/domain/streams.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';

// Issue 23: a job's history folds each run of renewals of one lease into one line, and reads only
// the run's first and last renewal where the store counts the rest (readJobRenewals). What it
// shows must be what folding every renewal shows (foldRenewals over all of the job's events),
// whatever happened between and around the renewals: runs of several leases (a failed attempt,
// then the retry's), a cancel mid-run, renewals of other jobs in the same appends, a job without
// a key (its own stream), a job under a further limit.

let s: ScriptedLedger;

beforeAll(async () => {
  s = await openScriptedLedger();
});

afterAll(async () => {
  await s?.close();
});

/** The history as read (renewals counted), and as folded from every event (a store that cannot count them). */
const both = async (jobId: string) => {
  const store = s.ledger.store;
  const reading = new Proxy(store, { get: (target, prop, receiver) => (prop === 'readJobRenewals' ? undefined : Reflect.get(target, prop, receiver)) }) as EventStore;
  const deps = (st: EventStore): AuditDeps => ({ store: st, jobStream: (id) => jobStreamOf(s.db.pool, id), load: async () => ({ revision: 'no_stream' }) });
  return { counted: await jobHistory(deps(store), { jobId }), folded: await jobHistory(deps(reading), { jobId }) };
};

type Act = 'renew' | 'renew-other' | 'fail' | 'cancel' | 'complete';

let clock = T0;
let n = 0;

/** A job runs its acts: renewals of its lease (alone, or beside another job's in one append), a failed attempt retried at once, a cancel mid-run, the end. */
const runJob = async (acts: readonly Act[], shape: 'keyed' | 'unkeyed' | 'limited'): Promise<string> => {
  const jobId = `r${n++}`;
  const key = shape === 'unkeyed' ? undefined : `runs/${jobId}`;
  await s.ledger.enqueue({ name: 'long', jobId, ...(key === undefined ? {} : { key, limit: 2 }), ...(shape === 'limited' ? { limits: [{ key: 'runs/api', limit: 50 }] } : {}), maxAttempts: 10 });
  const stream = key === undefined ? jobStream(jobId) : keyStream(key);
  const other = `${jobId}-other`;
  if (key !== undefined) await s.ledger.enqueue({ name: 'long', jobId: other, key, limit: 2 });
  const lease = async (id: string) => fold(initialKeyState, (await s.ledger.store.readStream(stream)).map(decodeRecorded)).jobs[id]?.lease ?? undefined;
  const leaseOn = async (id: string) => (await lease(id)) ?? null;
  const start = async (id: string) => {
    const l = await leaseOn(id);
    if (l === null || l.workerId !== null) return;
    expect(E.isRight(await s.ledger.execute(stream, { type: 'Start', jobId: id, leaseId: l.leaseId, workerId: 'w' }))).toBe(true);
  };
  await start(jobId);
  if (key !== undefined) await start(other);
  for (const act of acts) {
    clock += 10 * SEC;
    s.at(clock);
    const mine = await leaseOn(jobId);
    if (mine === null) break;
    if (act === 'renew') await s.ledger.execute(stream, { type: 'Renew', jobId, leaseId: mine.leaseId });
    if (act === 'renew-other') {
      const theirs = await lease(other);
      // Both renewals in one flush: one append holding the two jobs' events.
      await s.ledger.executeMany([
        { stream, command: { type: 'Renew', jobId, leaseId: mine.leaseId } },
        ...(theirs ? [{ stream, command: { type: 'Renew' as const, jobId: other, leaseId: theirs.leaseId } }] : []),
      ]);
    }
    if (act === 'fail') {
      await s.ledger.execute(stream, { type: 'Fail', jobId, leaseId: mine.leaseId, error: 'boom', jitter: 0 });
      clock += 3_600 * SEC;
      s.at(clock);
      await s.ledger.execute(stream, { type: 'AdmitDue' });
      await start(jobId);
    }
    if (act === 'cancel') {
      await s.ledger.execute(stream, { type: 'Cancel', jobId, by: 'ops' });
      // Renewals after the revocation are refused: nothing is written.
      await s.ledger.execute(stream, { type: 'Renew', jobId, leaseId: mine.leaseId });
      await s.ledger.execute(stream, { type: 'Stopped', jobId, leaseId: mine.leaseId, jitter: 0 });
      break;
    }
    if (act === 'complete') {
      await s.ledger.execute(stream, { type: 'Complete', jobId, leaseId: mine.leaseId });
      break;
    }
  }
  return jobId;
};

describe('a history folded from counted renewals is the one folded from every renewal', () => {
  it('runs of one lease or several, cut by a failure or a cancel, beside other jobs\' renewals, keyed, unkeyed or under a further limit', async () => {
    let countedRuns = 0;
    const act = fc.constantFrom<Act>('renew', 'renew', 'renew', 'renew-other', 'fail', 'cancel', 'complete');
    await fc.assert(
      fc.asyncProperty(fc.array(act, { minLength: 0, maxLength: 25 }), fc.constantFrom('keyed' as const, 'unkeyed' as const, 'limited' as const), async (acts, shape) => {
        const jobId = await runJob(acts, shape);
        const { counted, folded } = await both(jobId);
        expect(counted).toEqual(folded);
        if ((await foldedJobEvents(s.ledger.store, (await jobStreamOf(s.db.pool, jobId))!, jobId)) !== undefined) countedRuns++;
      }),
      { numRuns: 40, seed: 2324 },
    );
    // Most histories were read counted (the others fell back to reading every renewal).
    expect(countedRuns).toBeGreaterThan(30);
  }, 240_000);

  it('a run of 300 renewals is one line, read as two events', async () => {
    const jobId = await runJob(Array.from({ length: 300 }, () => 'renew' as const), 'keyed');
    const { counted, folded } = await both(jobId);
    expect(counted).toEqual(folded);
    expect(counted.events.filter((e) => e.type === 'LeaseRenewed')).toEqual([expect.objectContaining({ renewals: expect.objectContaining({ count: 300 }) })]);
    const runs = await s.ledger.store.readJobRenewals!(jobId, [keyStream(`runs/${jobId}`)]);
    expect(runs).toEqual([expect.objectContaining({ count: 300, lastRevision: runs[0]!.firstRevision + 299 })]);
  }, 120_000);
});

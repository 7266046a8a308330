import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RefusedError, UnknownJobError, UnknownKeyError } from '../../src/domain/errors.js';
import { keyStream } from '../../src/domain/streams.js';
import { SEC, T0, openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';

// The operator's actions on a real ledger: what each one records, and that a bad or refused one
// records nothing.

let s: ScriptedLedger;

beforeAll(async () => {
  s = await openScriptedLedger();
});

afterAll(async () => {
  await s?.close();
});

const typesOf = async (key: string, fromRevision: number) =>
  (await s.ledger.store.readStream(keyStream(key), { fromRevision })).map((e) => `${e.type} ${String(e.data.jobId ?? '')} ${String(e.data.by ?? e.data.reason ?? '')}`.trim());

const revisionOf = async (key: string) => {
  const r = (await s.ledger.keyState(key)).revision;
  return r === 'no_stream' ? -1 : r;
};

/** A key of limit 1 with `holder` holding (started when asked) and `parked` waiting. */
const keyWith = async (key: string, holder: string, parked: readonly string[], started = true) => {
  s.at(T0);
  await s.ledger.enqueue({ name: 'work', key, limit: 1, jobId: holder });
  for (const jobId of parked) await s.ledger.enqueue({ name: 'work', key, jobId });
  if (started) await s.start(key, holder);
  s.at(T0 + SEC);
  return revisionOf(key);
};

describe('release', () => {
  it('issue 21 #1: revokes a running holder with who did it, and frees nothing until its handler stopped; then the parked job takes the slot and the started holder is retried later', async () => {
    const from = (await keyWith('rel-one', 'r1', ['r2'])) + 1;
    expect(await s.ledger.release({ key: 'rel-one', jobId: 'r1', by: 'alice' })).toEqual({ released: ['r1'], stopping: ['r1'] });
    expect(await typesOf('rel-one', from)).toEqual(['LeaseRevoked r1 alice']);
    expect((await s.ledger.keyDetail('rel-one'))?.holders).toEqual([expect.objectContaining({ jobId: 'r1', revoked: { by: 'alice', at: T0 + SEC, cancels: false } })]);
    await s.stopped('rel-one', 'r1');
    expect(await typesOf('rel-one', from)).toEqual(['LeaseRevoked r1 alice', 'SlotReleased r1 revoked', 'JobScheduled r1', 'JobPromoted r2']);
    expect((await s.ledger.keyDetail('rel-one'))?.holders.map((h) => h.jobId)).toEqual(['r2']);
  });

  it('without a job, revokes every holder; holders that never started wait in line again and take the slots back', async () => {
    s.at(T0);
    await s.ledger.enqueue({ name: 'work', key: 'rel-all', limit: 2, jobId: 'x' });
    await s.ledger.enqueue({ name: 'work', key: 'rel-all', jobId: 'y' });
    expect((await s.ledger.release({ key: 'rel-all', by: 'bob' })).released.sort()).toEqual(['x', 'y']);
    expect((await s.ledger.keyDetail('rel-all'))?.holders.map((h) => h.leaseId)).toEqual(['x:3', 'y:4']);
  });

  it('a job that holds no slot is refused and nothing is written', async () => {
    await keyWith('rel-refused', 'rr1', ['rr2']);
    const before = await s.eventCount();
    await expect(s.ledger.release({ key: 'rel-refused', jobId: 'rr2', by: 'alice' })).rejects.toThrow(RefusedError);
    expect(await s.eventCount()).toBe(before);
  });
});

describe('discard', () => {
  it('drops the named parked jobs, or all of them, recorded with who did it', async () => {
    const from = (await keyWith('dis', 'd0', ['d1', 'd2', 'd3'])) + 1;
    expect(await s.ledger.discard({ key: 'dis', jobIds: ['d2'], by: 'carol' })).toEqual({ discarded: ['d2'] });
    expect(await s.ledger.discard({ key: 'dis', by: 'carol' })).toEqual({ discarded: ['d1', 'd3'] });
    expect(await typesOf('dis', from)).toEqual(['ParkedDiscarded d2 carol', 'ParkedDiscarded d1 carol', 'ParkedDiscarded d3 carol']);
    expect((await s.ledger.jobs({ key: 'dis', status: 'discarded' })).jobs.map((j) => j.finishReason)).toEqual(['discarded by carol', 'discarded by carol', 'discarded by carol']);
  });

  it('a job that is not parked is refused and nothing is written', async () => {
    await keyWith('dis-refused', 'dr1', ['dr2']);
    const before = await s.eventCount();
    await expect(s.ledger.discard({ key: 'dis-refused', jobIds: ['dr1'], by: 'carol' })).rejects.toThrow('jobs not parked on this key: dr1');
    expect(await s.eventCount()).toBe(before);
  });
});

describe('setLimit', () => {
  it('a raise promotes parked jobs at once and says which; a lowered limit promotes no one', async () => {
    const from = (await keyWith('lim', 'l0', ['l1', 'l2', 'l3'])) + 1;
    expect(await s.ledger.setLimit({ key: 'lim', limit: 3, by: 'dave' })).toEqual({ limit: 3, promoted: ['l1', 'l2'] });
    expect(await s.ledger.setLimit({ key: 'lim', limit: 1, by: 'dave' })).toEqual({ limit: 1, promoted: [] });
    expect(await typesOf('lim', from)).toEqual(['KeyLimitSet  dave', 'JobPromoted l1', 'JobPromoted l2', 'KeyLimitSet  dave']);
    expect((await s.ledger.keys()).find((k) => k.key === 'lim')).toMatchObject({ limit: 1, inUse: 3, parked: 1 });
  });
});

describe('cancel', () => {
  it('cancels a parked job (found through the jobs read model); a finished job is not cancelled again', async () => {
    const from = (await keyWith('can', 'c1', ['c2'])) + 1;
    expect(await s.ledger.cancel({ jobId: 'c2', by: 'erin' })).toEqual({ cancelled: true, stopping: false });
    expect(await typesOf('can', from)).toEqual(['JobCancelled c2 erin']);
    const before = await s.eventCount();
    expect(await s.ledger.cancel({ jobId: 'c2', by: 'erin' })).toEqual({ cancelled: false, stopping: false });
    expect(await s.eventCount()).toBe(before);
  });

  it('issue 21 #1: cancels a running holder: its lease is revoked, and its slot goes to the next parked job only once its handler stopped', async () => {
    const from = (await keyWith('can-holder', 'ch1', ['ch2'])) + 1;
    expect(await s.ledger.cancel({ jobId: 'ch1', by: 'erin' })).toEqual({ cancelled: true, stopping: true });
    expect(await typesOf('can-holder', from)).toEqual(['LeaseRevoked ch1 erin']);
    await s.stopped('can-holder', 'ch1');
    expect(await typesOf('can-holder', from)).toEqual(['LeaseRevoked ch1 erin', 'JobCancelled ch1 erin', 'SlotReleased ch1 cancelled', 'JobPromoted ch2']);
  });

  it('cancels a holder nobody started: its slot goes to the next parked job at once', async () => {
    const from = (await keyWith('can-unstarted', 'cu1', ['cu2'], false)) + 1;
    expect(await s.ledger.cancel({ jobId: 'cu1', by: 'erin' })).toEqual({ cancelled: true, stopping: false });
    expect(await typesOf('can-unstarted', from)).toEqual(['JobCancelled cu1 erin', 'SlotReleased cu1 cancelled', 'JobPromoted cu2']);
  });

  it('an unknown job is named as such', async () => {
    await expect(s.ledger.cancel({ jobId: 'nobody', by: 'erin' })).rejects.toThrow(UnknownJobError);
  });
});

describe('bad input and unknown keys write nothing', () => {
  beforeAll(async () => {
    await keyWith('guarded', 'g1', ['g2']);
  });

  it.each([
    ['release', 'key', () => s.ledger.release({ key: '', by: 'x' })],
    ['release', 'by', () => s.ledger.release({ key: 'guarded', by: '' })],
    ['release', 'jobId', () => s.ledger.release({ key: 'guarded', jobId: ' ', by: 'x' })],
    ['discard', 'jobIds', () => s.ledger.discard({ key: 'guarded', jobIds: 'p' as never, by: 'x' })],
    ['discard', 'jobIds[0]', () => s.ledger.discard({ key: 'guarded', jobIds: [''], by: 'x' })],
    ['setLimit', 'limit', () => s.ledger.setLimit({ key: 'guarded', limit: 0, by: 'x' })],
    ['setLimit', 'limit', () => s.ledger.setLimit({ key: 'guarded', limit: 1.5, by: 'x' })],
    ['setLimit', 'by', () => s.ledger.setLimit({ key: 'guarded', limit: 2, by: 'x'.repeat(201) })],
    ['cancel', 'jobId', () => s.ledger.cancel({ jobId: '', by: 'x' })],
    ['cancel', 'by', () => s.ledger.cancel({ jobId: 'g2', by: ' ' })],
  ])('%s: ValidationError naming %s', async (_action, field, act) => {
    const before = await s.eventCount();
    await expect(act()).rejects.toMatchObject({ name: 'ValidationError', field });
    expect(await s.eventCount()).toBe(before);
  });

  it.each([
    ['release', () => s.ledger.release({ key: 'nobody', by: 'x' })],
    ['discard', () => s.ledger.discard({ key: 'nobody', by: 'x' })],
    ['setLimit', () => s.ledger.setLimit({ key: 'nobody', limit: 3, by: 'x' })],
  ])('%s on an unknown key: UnknownKeyError, and the key is not created', async (_action, act) => {
    const before = await s.eventCount();
    await expect(act()).rejects.toThrow(UnknownKeyError);
    expect(await s.eventCount()).toBe(before);
    expect(await s.ledger.keyDetail('nobody')).toBeNull();
  });
});

import * as E from 'fp-ts/lib/Either.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyStream } from '../../src/domain/streams.js';
import { startTestServer, type TestServer } from './support.js';

// Stacked limits as the API shows them: a job under a further limit key (enqueue `limits`) is a
// guest of that key, among its holders or in its line, counted in its figures; a parked job says
// which of its other limits are full (waitsOn).

let s: TestServer;

beforeAll(async () => {
  s = await startTestServer();
});

afterAll(async () => {
  await s.close();
});

const detail = async (key: string) => {
  const { status, body } = await s.get('/api/keys/detail', { key });
  expect(status).toBe(200);
  return body;
};

const keyRow = async (key: string) => (await s.get('/api/keys')).body.keys.find((k: { key: string }) => k.key === key);

const guestGauges = async () => {
  const text = await (await fetch(`${s.url}/metrics`)).text();
  expect(text).toContain('# HELP jobledger_limit_guests ');
  expect(text).toContain('# TYPE jobledger_limit_guests gauge');
  return Object.fromEntries([...text.matchAll(/^jobledger_limit_guests\{state="(\w+)"\} (\d+)$/gm)].map((m) => [m[1], Number(m[2])]));
};

/** Starts and completes a holder of `key`, as a worker would. */
const complete = async (key: string, jobId: string) => {
  await s.start(key, jobId);
  const holder = (await s.ledger.keyDetail(key))!.holders.find((h) => h.jobId === jobId)!;
  const result = await s.ledger.execute(keyStream(key), { type: 'Complete', jobId, leaseId: holder.leaseId });
  expect(E.isRight(result), JSON.stringify(result)).toBe(true);
};

describe('a limit key with guests (jobs of other keys under its limit)', () => {
  it('shows a guest holder with its home, its lease and worker from its home, and counts it in the key list and /metrics', async () => {
    await s.ledger.enqueue({ name: 'sync', key: 'lk:b', limit: 1, limits: [{ key: 'lk:t', limit: 2 }], jobId: 'g1' });
    await s.start('lk:b', 'g1', 'worker-9');
    const t = await detail('lk:t');
    expect(t).toMatchObject({ key: 'lk:t', limit: 2, parked: [] });
    expect(t.holders).toEqual([
      expect.objectContaining({ jobId: 'g1', name: 'sync', leaseId: 'g1:1', how: 'acquired', workerId: 'worker-9', attempt: 1, state: 'worker-gone', leaseState: 'worker-gone', home: 'lk:b', limits: ['lk:t'] }),
    ]);
    expect(t.holders[0].expiresAt).toBeTypeOf('number');
    // At home it is one of the key's own holders.
    expect((await detail('lk:b')).holders).toEqual([expect.objectContaining({ jobId: 'g1', workerId: 'worker-9', home: null, limits: ['lk:t'] })]);
    // worker-9 never announced itself: the guest's state is its home slot's, and no live worker runs it.
    expect(await keyRow('lk:t')).toMatchObject({ limit: 2, inUse: 1, parked: 0, atLimit: false, leaseState: 'worker-gone', holderStates: { running: 0, unstarted: 0, expired: 0, workerGone: 1 } });
    expect(await guestGauges()).toEqual({ holding: 1, parked: 0 });
  });

  it("shows a guest parked because its home key is full, with waitsOn naming that key; a promotion at home takes the limit key's slot too", async () => {
    await s.ledger.enqueue({ name: 'a-job', key: 'lk:a', limit: 1, jobId: 'a1' });
    expect(await s.ledger.enqueue({ name: 'sync', key: 'lk:a', limits: [{ key: 'lk:t' }], jobId: 'g2' })).toMatchObject({ status: 'parked' });
    const t = await detail('lk:t');
    expect(t.parked).toEqual([{ jobId: 'g2', name: 'sync', priority: 0, parkedAt: expect.any(Number), home: 'lk:a', limits: ['lk:t'], waitsOn: [{ key: 'lk:a', limit: 1, inUse: 1, paused: false }] }]);
    // lk:t has room: it is not what g2 waits on at home.
    expect((await detail('lk:a')).parked).toEqual([expect.objectContaining({ jobId: 'g2', home: null, limits: ['lk:t'], waitsOn: [] })]);
    expect(await keyRow('lk:t')).toMatchObject({ inUse: 1, parked: 1, atLimit: false, oldestParkedAt: t.parked[0].parkedAt });
    expect(await guestGauges()).toEqual({ holding: 1, parked: 1 });

    await complete('lk:a', 'a1');
    const after = await detail('lk:t');
    expect(after.parked).toEqual([]);
    expect(after.holders.map((h: { jobId: string; home: string; how: string; leaseState: string }) => [h.jobId, h.home, h.how, h.leaseState])).toEqual([
      ['g1', 'lk:b', 'acquired', 'worker-gone'],
      ['g2', 'lk:a', 'promoted', 'unstarted'],
    ]);
    expect(await keyRow('lk:t')).toMatchObject({ inUse: 2, parked: 0, atLimit: true, oldestParkedAt: null });
    expect(await guestGauges()).toEqual({ holding: 2, parked: 0 });
  });

  it("merges the key's own parked jobs and its parked guests in promotion order; a full limit key is what both wait on elsewhere", async () => {
    // lk:t is full (g1, g2). Its own t3 parks; g3 (priority -1) parks at lk:c, which has room, for lk:t.
    expect(await s.ledger.enqueue({ name: 'own', key: 'lk:t', jobId: 't3' })).toMatchObject({ status: 'parked' });
    expect(await s.ledger.enqueue({ name: 'sync', key: 'lk:c', limit: 1, priority: -1, limits: [{ key: 'lk:t' }], jobId: 'g3' })).toMatchObject({ status: 'parked' });
    const t = await detail('lk:t');
    expect(t.parked.map((p: { jobId: string; home: string | null; waitsOn: unknown[] }) => [p.jobId, p.home, p.waitsOn])).toEqual([
      ['g3', 'lk:c', []],
      ['t3', null, []],
    ]);
    expect((await detail('lk:c')).parked).toEqual([expect.objectContaining({ jobId: 'g3', home: null, waitsOn: [{ key: 'lk:t', limit: 2, inUse: 2, paused: false }] })]);
    expect(await keyRow('lk:t')).toMatchObject({ inUse: 2, parked: 2, atLimit: true });
    // lk:c holds nothing and parks g3 for lk:t only.
    expect(await keyRow('lk:c')).toMatchObject({ inUse: 0, parked: 1, atLimit: false });
    expect(await guestGauges()).toEqual({ holding: 2, parked: 1 });
  });

  it('a paused home is waited on too, full or not', async () => {
    expect((await s.post('/api/keys/pause', { key: 'lk:c', reason: 'maintenance' })).status).toBe(200);
    const g3 = (await detail('lk:t')).parked.find((p: { jobId: string }) => p.jobId === 'g3');
    expect(g3.waitsOn).toEqual([{ key: 'lk:c', limit: 1, inUse: 0, paused: true }]);
  });
});

import { userInfo } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyStream } from '../../src/domain/streams.js';
import { expectRefused as expectRefusedBy, runCli } from '../support/cli.js';
import { openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';

// `jobledger release`, `discard`, `set-limit`, `pause`, `resume` and `cancel` as subprocesses against a ledger set
// up in-process on the same database: what each records in the ledger, and that bad input
// records nothing.

let s: ScriptedLedger;

const jobledger = (...args: string[]) => runCli(s.db.url, args);

beforeAll(async () => {
  s = await openScriptedLedger();
});

afterAll(async () => {
  await s?.close();
});

/** A key of limit 1: `holder` holds its slot (started by w1, a lease of an hour) and `parked` wait in line. */
const keyWith = async (key: string, holder: string, parked: readonly string[]): Promise<number> => {
  s.at(Date.now());
  await s.ledger.enqueue({ name: 'work', key, limit: 1, leaseMs: 3_600_000, jobId: holder });
  for (const jobId of parked) await s.ledger.enqueue({ name: 'work', key, jobId });
  await s.start(key, holder);
  const revision = (await s.ledger.keyState(key)).revision;
  return revision === 'no_stream' ? 0 : revision + 1;
};

/** The key's events from a revision on, as "Type jobId by|reason". */
const recorded = async (key: string, fromRevision: number) =>
  (await s.ledger.store.readStream(keyStream(key), { fromRevision })).map((e) => [e.type, e.data.jobId, e.data.by ?? e.data.reason].filter((x) => x != null).join(' '));

const expectRefused = (args: readonly string[], named: string) => expectRefusedBy(jobledger, () => s.eventCount(), args, named);

describe('jobledger release', () => {
  it('revokes a live holder, recorded with who did it, and says its handler is told to stop: its slot passes on once it has', async () => {
    const from = await keyWith('rel', 'r1', ['r2']);
    const result = await jobledger('release', '--key', 'rel', '--job', 'r1', '--by', 'alice');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('revoked the lease of job r1 on key rel (by alice); it is running: its handler is told to stop, and its slot passes on when it has');
    expect(await recorded('rel', from)).toEqual(['LeaseRevoked r1 alice']);
  });

  it('--force frees a running holder whose worker is gone at once: the parked job takes the slot, recorded as forced', async () => {
    const from = await keyWith('rel-force', 'rf1', ['rf2']);
    const result = await jobledger('release', '--key', 'rel-force', '--job', 'rf1', '--by', 'alice', '--force', '--json');
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ released: ['rf1'], stopping: [] });
    expect(await recorded('rel-force', from)).toEqual(['LeaseRevoked rf1 alice', 'SlotReleased rf1 revoked', 'JobScheduled rf1', 'JobPromoted rf2']);
  });

  it('--json, every holder, and --by defaults to the OS user', async () => {
    const from = await keyWith('rel-all', 'ra1', []);
    const result = await jobledger('release', '--key', 'rel-all', '--json');
    expect(result.code, result.stderr).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ released: ['ra1'], stopping: ['ra1'] });
    expect(await recorded('rel-all', from)).toEqual([`LeaseRevoked ra1 ${userInfo().username}`]);
  });

  it.each([
    [['--key', ''], '--key'],
    [['--key', 'rel-bad', '--by', ''], '--by'],
    [['--key', 'rel-bad', '--job', 'rb2'], 'job rb2 is parked, not holding a slot of key rel-bad'],
    [['--key', 'nobody'], 'nobody'],
    [[], '--key'],
  ])('bad input %j exits 2, names %s, writes nothing', async (flags, named) => {
    if ((await s.ledger.keyDetail('rel-bad')) === null) await keyWith('rel-bad', 'rb1', ['rb2']);
    await expectRefused(['release', ...flags], named);
  });
});

describe('jobledger discard', () => {
  it('removes the named parked job, then all the rest (--json)', async () => {
    const from = await keyWith('dis', 'd0', ['d1', 'd2', 'd3']);
    const one = await jobledger('discard', '--key', 'dis', '--job', 'd2', '--by', 'carol');
    expect(one.code, one.stderr).toBe(0);
    expect(one.stdout).toContain('discarded parked job d2 on key dis (by carol)');
    const rest = await jobledger('discard', '--key', 'dis', '--by', 'carol', '--json');
    expect(JSON.parse(rest.stdout)).toEqual({ discarded: ['d1', 'd3'] });
    expect(await recorded('dis', from)).toEqual(['ParkedDiscarded d2 carol', 'ParkedDiscarded d1 carol', 'ParkedDiscarded d3 carol']);
    expect(await s.ledger.keyDetail('dis')).toMatchObject({ parked: [], holders: [{ jobId: 'd0' }] });
  });

  it.each([
    [['--key', 'dis-bad', '--job', 'db1'], 'job db1 is running, not parked on key dis-bad'],
    [['--key', 'dis-bad', '--job', ''], '--job'],
    [['--key', 'dis-bad', '--by', ' '], '--by'],
    [['--key', 'nobody'], 'nobody'],
  ])('bad input %j exits 2, names %s, writes nothing', async (flags, named) => {
    if ((await s.ledger.keyDetail('dis-bad')) === null) await keyWith('dis-bad', 'db1', ['db2']);
    await expectRefused(['discard', ...flags], named);
  });
});

describe('jobledger set-limit', () => {
  it('a raise promotes parked jobs at once and says which', async () => {
    const from = await keyWith('lim', 'l0', ['l1', 'l2', 'l3']);
    const result = await jobledger('set-limit', '--key', 'lim', '--limit', '3', '--by', 'dave');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toBe('key lim: limit 3 (by dave)\npromoted parked job l1\npromoted parked job l2\n');
    expect(await recorded('lim', from)).toEqual(['KeyLimitSet dave', 'JobPromoted l1', 'JobPromoted l2']);
    const lowered = await jobledger('set-limit', '--key', 'lim', '--limit', '1', '--by', 'dave', '--json');
    expect(JSON.parse(lowered.stdout)).toEqual({ limit: 1, promoted: [] });
    expect((await s.ledger.keyDetail('lim'))?.holders.map((h) => h.jobId)).toEqual(['l0', 'l1', 'l2']);
  });

  it.each([
    [['--key', 'lim-bad', '--limit', '0'], '--limit'],
    [['--key', 'lim-bad', '--limit', 'two'], '--limit'],
    [['--key', 'lim-bad'], '--limit'],
    [['--key', '', '--limit', '2'], '--key'],
    [['--key', 'nobody', '--limit', '2'], 'nobody'],
  ])('bad input %j exits 2, names %s, writes nothing', async (flags, named) => {
    if ((await s.ledger.keyDetail('lim-bad')) === null) await keyWith('lim-bad', 'lb1', ['lb2']);
    await expectRefused(['set-limit', ...flags], named);
  });
});

describe('jobledger pause and resume', () => {
  it('pause records who and why, new jobs park though a slot frees; resume promotes and says which', async () => {
    const from = await keyWith('pz', 'pz0', []);
    const paused = await jobledger('pause', '--key', 'pz', '--by', 'frank', '--reason', 'vendor outage');
    expect(paused.code, paused.stderr).toBe(0);
    expect(paused.stdout).toBe('key pz: paused (by frank: vendor outage)\n');
    expect((await jobledger('keys')).stdout.split('\n').find((l) => l.includes('pz ') || l.includes('pz│'))).toContain('by frank: vendor outage');
    await s.ledger.enqueue({ name: 'work', key: 'pz', jobId: 'pz1' });
    await new Promise((r) => setTimeout(r, 5));
    const whilePaused = new Date().toISOString();
    await new Promise((r) => setTimeout(r, 5));
    const resumed = await jobledger('resume', '--key', 'pz', '--by', 'frank', '--json');
    expect(resumed.code, resumed.stderr).toBe(0);
    // pz0 still holds the only slot: nothing to promote yet.
    expect(JSON.parse(resumed.stdout)).toEqual({ promoted: [] });
    expect(await recorded('pz', from)).toEqual(['KeyPaused frank', 'JobEnqueued pz1', 'JobParked pz1', 'KeyResumed frank']);
    // The past is replayable: state --at a moment while it was paused says so, and by whom.
    expect(JSON.parse((await jobledger('state', '--key', 'pz', '--at', whilePaused, '--json')).stdout).paused).toMatchObject({ by: 'frank', reason: 'vendor outage' });
    expect(JSON.parse((await jobledger('state', '--key', 'pz', '--json')).stdout).paused).toBeNull();
  });

  it.each([
    [['pause', '--key', 'pz-bad', '--by', 'frank', '--reason', ''], '--reason'],
    [['pause', '--key', ''], '--key'],
    [['pause', '--key', 'nobody'], 'nobody'],
    [['resume', '--key', 'pz-bad'], 'not paused'],
  ])('bad input %j exits 2, names %s, writes nothing', async (args, named) => {
    if ((await s.ledger.keyDetail('pz-bad')) === null) await keyWith('pz-bad', 'pzb0', []);
    await expectRefused(args, named);
  });
});

describe('jobledger cancel', () => {
  it('cancels a parked job, recorded with who did it; a second cancel changes nothing and exits 2, as every action that does nothing (test/cli/unchanged.int.test.ts)', async () => {
    const from = await keyWith('can', 'c1', ['c2']);
    const result = await jobledger('cancel', '--job', 'c2', '--by', 'erin');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('cancelled job c2 (by erin)');
    expect(await recorded('can', from)).toEqual(['JobCancelled c2 erin']);
    await expectRefused(['cancel', '--job', 'c2', '--json'], 'job c2 is cancelled (by erin)');
  });

  it.each([
    [['--job', ''], '--job'],
    [['--job', 'nobody'], 'nobody'],
    [['--job', 'c1', '--by', ''], '--by'],
    [[], '--job'],
  ])('bad input %j exits 2, names %s, writes nothing', async (flags, named) => {
    await expectRefused(['cancel', ...flags], named);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openScriptedLedger, type ScriptedLedger } from '../support/ledger.js';
import { runCliInProcess } from './in-process.js';

// Regression (issue 25): `cancel` of a finished job exited 0 ("had already finished; nothing
// changed" on stdout) where `retry` of a job not dead exited 2, so a script could not tell an
// action done from one that did nothing. Every operator action whose job or key leaves it nothing
// to do now exits 2 with one line on stderr naming the job or key, where it stands and why, and
// writes nothing. Run in this process (runCliInProcess) against a ledger set up beside it.

let s: ScriptedLedger;

beforeAll(async () => {
  s = await openScriptedLedger();
  // The CLI's ledger runs on the wall clock; so do the events set up here.
  s.at(Date.now());
});

afterAll(async () => {
  await s?.close();
});

const jobledger = (...args: string[]) => runCliInProcess(s.db.url, args);

/** Runs an action that must do nothing: exit 2, nothing on stdout, `line` alone on stderr, no event written. */
const expectUnchanged = async (args: readonly string[], line: string) => {
  const before = await s.eventCount();
  const result = await jobledger(...args);
  expect(result).toEqual({ code: 2, stdout: '', stderr: `error: ${line}\n` });
  expect(await s.eventCount()).toBe(before);
};

/** Runs an action that must do something: exit 0, and at least one event written. */
const expectDone = async (args: readonly string[]) => {
  const before = await s.eventCount();
  const result = await jobledger(...args);
  expect(result.code, result.stderr).toBe(0);
  expect(await s.eventCount()).toBeGreaterThan(before);
};

const PASSES_ON = 'its handler is told to stop, and its slot passes on when it has (or when its lease lapses)';

describe('cancel', () => {
  it('of a completed job', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'u-can', limit: 1, jobId: 'uc-done' });
    await s.start('u-can', 'uc-done');
    await s.complete('u-can', 'uc-done');
    await expectUnchanged(['cancel', '--job', 'uc-done', '--by', 'erin'], 'job uc-done is completed, not scheduled, parked or running: only such a job is cancelled; nothing changed');
  });

  it('of a cancelled job, naming who cancelled it, with --json too (nothing on stdout)', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'u-can', jobId: 'uc-twice' });
    await expectDone(['cancel', '--job', 'uc-twice', '--by', 'erin']);
    const line = 'job uc-twice is cancelled (by erin), not scheduled, parked or running: only such a job is cancelled; nothing changed';
    await expectUnchanged(['cancel', '--job', 'uc-twice', '--by', 'erin'], line);
    await expectUnchanged(['cancel', '--job', 'uc-twice', '--by', 'erin', '--json'], line);
  });

  it('of a running job already being cancelled', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'u-can-run', limit: 1, jobId: 'uc-run' });
    await s.start('u-can-run', 'uc-run');
    await expectDone(['cancel', '--job', 'uc-run', '--by', 'erin']);
    await expectUnchanged(['cancel', '--job', 'uc-run', '--by', 'frank'], `job uc-run is running and already being cancelled (by erin): ${PASSES_ON}; nothing changed`);
  });
});

describe('release', () => {
  it('of a key with no holder', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'u-rel-none', limit: 1, jobId: 'ur-done' });
    await s.start('u-rel-none', 'ur-done');
    await s.complete('u-rel-none', 'ur-done');
    await expectUnchanged(['release', '--key', 'u-rel-none'], 'key u-rel-none has no holder: there is no lease to revoke; nothing changed');
  });

  it('of a job that holds no slot (it is parked)', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'u-rel', limit: 1, jobId: 'ur-1' });
    await s.ledger.enqueue({ name: 'work', key: 'u-rel', jobId: 'ur-2' });
    await expectUnchanged(['release', '--key', 'u-rel', '--job', 'ur-2'], "job ur-2 is parked, not holding a slot of key u-rel: only a holder's lease is revoked; nothing changed");
  });

  it('of a running holder already being released, one by one and all at once', async () => {
    await s.start('u-rel', 'ur-1');
    await expectDone(['release', '--key', 'u-rel', '--job', 'ur-1', '--by', 'alice']);
    await expectUnchanged(['release', '--key', 'u-rel', '--job', 'ur-1', '--by', 'bob'], `job ur-1 on key u-rel is already being released (by alice): ${PASSES_ON}; --force frees it now; nothing changed`);
    await expectUnchanged(['release', '--key', 'u-rel', '--by', 'bob'], `every holder of key u-rel (1) is already being released: ${PASSES_ON}; --force frees them now; nothing changed`);
  });
});

describe('discard', () => {
  it('of a key with nothing parked', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'u-dis', limit: 1, jobId: 'ud-1' });
    await expectUnchanged(['discard', '--key', 'u-dis'], 'key u-dis has no parked job: there is no job to discard; nothing changed');
  });

  it('of a job that is not parked (it holds a slot)', async () => {
    await expectUnchanged(['discard', '--key', 'u-dis', '--job', 'ud-1'], 'job ud-1 is holding, not parked on key u-dis: only a parked job is discarded; nothing changed');
  });

  it('--dead of a key with no dead job, and of a job that is not dead', async () => {
    await expectUnchanged(['discard', '--dead', '--key', 'u-dis'], 'key u-dis has no dead job: only a dead job is discarded as dead; nothing changed');
    await expectUnchanged(['discard', '--dead', '--job', 'ud-1'], 'job ud-1 is holding, not dead: only a dead job is retried or discarded as dead; nothing changed');
  });
});

describe('retry', () => {
  it('--key K --dead of a key with no dead job, and --job of a job that is not dead', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'u-retry', limit: 1, jobId: 'ut-1' });
    await expectUnchanged(['retry', '--key', 'u-retry', '--dead'], 'key u-retry has no dead job: only a dead job is retried; nothing changed');
    await expectUnchanged(['retry', '--job', 'ut-1'], 'job ut-1 is holding, not dead: only a dead job is retried or discarded as dead; nothing changed');
  });
});

describe('pause and resume', () => {
  it('pause of a paused key names the key and who paused it; resume of a key not paused names the key', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'u-pause', limit: 1, jobId: 'up-1' });
    await expectUnchanged(['resume', '--key', 'u-pause'], 'key u-pause is not paused: only a paused key is resumed; nothing changed');
    await expectDone(['pause', '--key', 'u-pause', '--by', 'frank', '--reason', 'vendor outage']);
    await expectUnchanged(['pause', '--key', 'u-pause', '--by', 'erin'], 'key u-pause is already paused (by frank: vendor outage): a pause keeps the first who and why; nothing changed');
  });
});

describe('set-limit', () => {
  it('to the limit and lease the key has', async () => {
    await s.ledger.enqueue({ name: 'work', key: 'u-limit', limit: 2, leaseMs: 30_000, jobId: 'ul-1' });
    await expectUnchanged(['set-limit', '--key', 'u-limit', '--limit', '2'], 'key u-limit has limit 2 and lease 30s already: a limit set again records nothing; nothing changed');
    await expectUnchanged(['set-limit', '--key', 'u-limit', '--limit', '2', '--lease', '30s'], 'key u-limit has limit 2 and lease 30s already: a limit set again records nothing; nothing changed');
    // Either one changed is a change.
    await expectDone(['set-limit', '--key', 'u-limit', '--limit', '2', '--lease', '1m']);
    await expectDone(['set-limit', '--key', 'u-limit', '--limit', '3']);
  });
});

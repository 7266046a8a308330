import type { Ledger } from '../../src/adapters/ledger.js';
import { keyStateAt } from '../../src/commands/key-state-at.js';
import { keyStream } from '../../src/domain/streams.js';

/**
 * Every answer about history that must not change when its events move (archive): each key's
 * state, its state at each moment, and the audit of each key and job.
 */
export const historyOf = async (ledger: Ledger, of: { readonly keys: readonly string[]; readonly moments: readonly number[]; readonly jobIds: readonly string[] }) => ({
  states: await Promise.all(of.keys.map(async (key) => JSON.stringify((await ledger.keyState(key)).state))),
  at: await Promise.all(of.keys.flatMap((key) => of.moments.map(async (at) => JSON.stringify(await keyStateAt(ledger.store, keyStream(key), { at }))))),
  audits: await Promise.all([...of.keys.map((key) => ledger.audit({ key })), ...of.jobIds.map((jobId) => ledger.audit({ jobId }))]),
});

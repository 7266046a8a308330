import * as E from 'fp-ts/lib/Either.js';
import { createLedger, type Ledger } from '../../src/adapters/ledger.js';
import type { Command } from '../../src/domain/commands.js';
import type { KeyEvent } from '../../src/domain/events.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { keyStream } from '../../src/domain/streams.js';
import { createMigratedDatabase, type MigratedDatabase } from './database.js';

/** 03:00 UTC, 30 Nov 2026: scripted runs speak of times as offsets from it. */
export const T0 = Date.UTC(2026, 10, 30, 3, 0, 0);
export const SEC = 1_000;

/**
 * A real ledger on a fresh migrated database with a clock the test moves (`at`), for scripting a
 * key's history command by command: the decisions, and so the recorded times, are exact.
 */
export interface ScriptedLedger {
  readonly db: MigratedDatabase;
  readonly ledger: Ledger;
  /** Sets the ledger's clock. */
  at(time: number): void;
  /** Runs a command on the key's stream; fails the test if the decider refuses it. */
  run(key: string, command: Command): Promise<readonly KeyEvent[]>;
  /** The lease the job holds now on the key. */
  leaseOf(key: string, jobId: string): Promise<string>;
  start(key: string, jobId: string, workerId?: string): Promise<string>;
  complete(key: string, jobId: string): Promise<void>;
  fail(key: string, jobId: string, error: string): Promise<void>;
  /** The job's worker says its handler stopped, once a release or a cancel revoked its running lease. */
  stopped(key: string, jobId: string): Promise<void>;
  /** Events in the whole ledger. */
  eventCount(): Promise<number>;
  close(): Promise<void>;
}

export const openScriptedLedger = async (): Promise<ScriptedLedger> => {
  const db = await createMigratedDatabase(6, { pipeline: true });
  let now = T0;
  const ledger = await createLedger({ pool: db.pool, migrate: false, clock: () => now, random: () => 0.5, logger: silentLogger });
  const run = async (key: string, command: Command): Promise<readonly KeyEvent[]> => {
    const result = await ledger.execute(keyStream(key), command);
    if (E.isLeft(result)) throw new Error(`${command.type} on ${key} refused: ${JSON.stringify(result.left)}`);
    return result.right.events;
  };
  const leaseOf = async (key: string, jobId: string): Promise<string> => {
    const lease = (await ledger.keyState(key)).state.jobs[jobId]?.lease;
    if (!lease) throw new Error(`${jobId} holds no slot on ${key}`);
    return lease.leaseId;
  };
  return {
    db,
    ledger,
    at: (time) => {
      now = time;
    },
    run,
    leaseOf,
    start: async (key, jobId, workerId = 'w1') => {
      const leaseId = await leaseOf(key, jobId);
      await run(key, { type: 'Start', jobId, leaseId, workerId });
      return leaseId;
    },
    complete: async (key, jobId) => {
      await run(key, { type: 'Complete', jobId, leaseId: await leaseOf(key, jobId) });
    },
    fail: async (key, jobId, error) => {
      await run(key, { type: 'Fail', jobId, leaseId: await leaseOf(key, jobId), error, jitter: 0 });
    },
    stopped: async (key, jobId) => {
      await run(key, { type: 'Stopped', jobId, leaseId: await leaseOf(key, jobId), jitter: 0 });
    },
    eventCount: async () => (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n,
    close: async () => {
      await ledger.close();
      await db.drop();
    },
  };
};

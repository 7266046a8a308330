import { setTimeout as sleep } from 'node:timers/promises';
import { reconnectDelayMs } from '../../domain/backoff.js';
import type { Logger } from '../../domain/ports/logger.js';
import type { Outages } from '../../domain/ports/outages.js';

/**
 * Whether an error means the database could not be reached or dropped the session (a restart, a
 * failover, a network cut), as opposed to refusing a statement. Class 57P (admin_shutdown,
 * crash_shutdown, cannot_connect_now) and class 08 (connection exceptions) end the session; the
 * rest are Node's socket errors and pg's messages for a connection that went away.
 */
export const isConnectionError = (error: unknown, depth = 0): boolean => {
  if (!(error instanceof Error)) return false;
  // The writer wraps what it retries (TransientWriteError): the cause says why.
  if (depth < 3 && error.cause !== undefined && isConnectionError(error.cause, depth + 1)) return true;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (code.startsWith('57P') || code.startsWith('08') || /^E(CONNREFUSED|CONNRESET|PIPE|HOSTUNREACH|NETUNREACH|TIMEDOUT|AI_AGAIN)$|^ENOTFOUND$/.test(code))) return true;
  return /Connection terminated|not queryable|timeout exceeded when trying to connect|ECONNREFUSED|ECONNRESET|EPIPE/.test(error.message);
};

/**
 * One process's view of whether PostgreSQL answers: the first connection error after it last
 * answered opens an outage (one warning), the first answer after that closes it (one info line
 * with how long it lasted). Everything in between is silent here; whoever retries logs at debug.
 */
export class DatabaseOutages implements Outages {
  private since: number | undefined;
  private ended = 0;

  constructor(
    private readonly log: Logger,
    private readonly clock: () => number = Date.now,
  ) {}

  get down(): boolean {
    return this.since !== undefined;
  }

  get generation(): number {
    return this.ended;
  }

  /** Reports an error; returns whether it was a connection error (the caller should retry later). */
  failed(error: unknown, since = this.ended): boolean {
    if (!isConnectionError(error)) return false;
    if (this.since === undefined && since === this.ended) {
      this.since = this.clock();
      this.log.warn({ err: error }, 'PostgreSQL unreachable; every part keeps retrying until it answers');
    }
    return true;
  }

  answered(): void {
    if (this.since === undefined) return;
    const downMs = this.clock() - this.since;
    this.since = undefined;
    this.ended++;
    this.log.info({ downMs }, `PostgreSQL answers again after ${(downMs / 1000).toFixed(1)} s`);
  }
}

/**
 * Runs `attempt` until it succeeds, waiting out connection errors (reported to `outages`) for at
 * most `timeoutMs`; any other error, or the last connection error past the deadline, is thrown.
 */
export const waitingForDatabase = async <T>(attempt: () => Promise<T>, options: { outages: DatabaseOutages; timeoutMs: number; random: () => number; clock: () => number }): Promise<T> => {
  const deadline = options.clock() + options.timeoutMs;
  for (let n = 1; ; n++) {
    try {
      const result = await attempt();
      options.outages.answered();
      return result;
    } catch (error) {
      if (!options.outages.failed(error) || options.clock() >= deadline) throw error;
      await sleep(Math.min(reconnectDelayMs(n, options.random()), Math.max(0, deadline - options.clock())));
    }
  }
};

const watched = new WeakMap<object, DatabaseOutages>();

/**
 * The outages of a pool, watched once however many ledgers share it: an idle client losing its
 * connection (the pool's 'error', which would otherwise end the process) opens one, a client
 * connecting closes it.
 */
export const outagesOf = (pool: { on(event: 'error' | 'connect', listener: (error: Error) => void): unknown }, log: Logger): DatabaseOutages => {
  let outages = watched.get(pool);
  if (outages === undefined) {
    const made = (outages = new DatabaseOutages(log));
    pool.on('error', (error) => {
      if (!made.failed(error)) log.warn({ err: error }, 'idle PostgreSQL connection failed');
    });
    pool.on('connect', () => made.answered());
    watched.set(pool, made);
  }
  return outages;
};

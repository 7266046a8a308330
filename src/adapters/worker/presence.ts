import { hostname } from 'node:os';
import type { Logger } from '../../domain/ports/logger.js';
import type { Outages } from '../../domain/ports/outages.js';
import type { Queryable } from '../../projections/transaction.js';

// A worker's presence row (the workers table, migration 0009): written when it starts, refreshed
// on each heartbeat, marked stopped on a graceful stop. A worker killed outright writes nothing
// more, and readers call it gone once WORKER_LIVE_BEATS of its heartbeats pass unseen
// (src/adapters/postgres/queries/workers.ts). Presence MUST never stop the work: a beat that
// fails (the database down) is reported to the outages and tried again at the next beat, and
// the jobs run on regardless.

/**
 * Heartbeat period, 5 s: a killed worker is called gone within 15 s (3 beats), well before its
 * holders' leases run out at the default 30 s, so the page says "worker gone" before "lease
 * expired" and the operator knows why; and it is one small HOT update per worker every 5 s.
 */
export const PRESENCE_INTERVAL_MS_DEFAULT = 5_000;

/** A gone worker's row is kept this long, for the incident review (`jobledger workers --all`), then pruned at the next start of any worker. */
export const PRESENCE_KEPT_MS = 24 * 60 * 60 * 1000;

export interface PresenceInfo {
  readonly id: string;
  readonly queue: string;
  readonly concurrency: number;
  readonly intervalMs: number;
}

// An announcement (the first beat that gets through) resets the row: a worker given a fixed id
// may be a new process under an old one's id. The prune rides on it: rows come only from starts,
// so pruning at each start keeps the table to the workers of the last day.
const ANNOUNCE_SQL = /* sql */ `
WITH pruned AS (
  DELETE FROM workers WHERE last_seen < statement_timestamp() - $7 * interval '1 millisecond' AND id <> $1
)
INSERT INTO workers (id, host, pid, queue, concurrency, heartbeat_ms, started_at, last_seen, running, stopped_at)
VALUES ($1, $2, $3, $4, $5, $6, statement_timestamp(), statement_timestamp(), $8, NULL)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, queue = excluded.queue, concurrency = excluded.concurrency,
  heartbeat_ms = excluded.heartbeat_ms, started_at = excluded.started_at, last_seen = excluded.last_seen, running = excluded.running, stopped_at = NULL`;

// A row pruned or deleted by hand meanwhile is written again (the INSERT), so a live worker is never missing for long.
const BEAT_SQL = /* sql */ `
INSERT INTO workers (id, host, pid, queue, concurrency, heartbeat_ms, started_at, last_seen, running)
VALUES ($1, $2, $3, $4, $5, $6, statement_timestamp(), statement_timestamp(), $7)
ON CONFLICT (id) DO UPDATE SET last_seen = excluded.last_seen, running = excluded.running`;

const STOP_SQL = /* sql */ `
UPDATE workers SET last_seen = statement_timestamp(), stopped_at = statement_timestamp(), running = 0 WHERE id = $1`;

export class Presence {
  private timer: NodeJS.Timeout | undefined;
  /** The beat in flight: the next one waits for it (a slow database gets no pile of beats), and stop() for the last. */
  private beating: Promise<void> = Promise.resolve();
  private inFlight = false;
  /** Whether an announcement got through; until one does, each beat announces. */
  private announced = false;

  constructor(
    private readonly db: Queryable,
    private readonly outages: Outages,
    private readonly log: Logger,
    private readonly info: PresenceInfo,
    /** Jobs running now, reported with each beat. */
    private readonly running: () => number,
  ) {}

  /** Announces the worker and beats from now on; resolves once the announcement was tried (written, or failed and left to the next beat). */
  start(): Promise<void> {
    if (this.timer) return this.beating;
    this.beat();
    this.timer = setInterval(() => this.beat(), this.info.intervalMs);
    // Presence never keeps a process alive: the worker's own loop does while it runs.
    this.timer.unref();
    return this.beating;
  }

  /** Marks the row stopped, after the last beat; a failure is logged, and the row goes gone by itself. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.beating;
    await this.write('stop', STOP_SQL, [this.info.id]);
  }

  private beat(): void {
    if (this.inFlight) return;
    this.inFlight = true;
    const { id, queue, concurrency, intervalMs } = this.info;
    const common = [id, hostname(), process.pid, queue, concurrency, intervalMs];
    const written = this.announced
      ? this.write('heartbeat', BEAT_SQL, [...common, this.running()])
      : this.write('announce', ANNOUNCE_SQL, [...common, PRESENCE_KEPT_MS, this.running()]).then((ok) => void (this.announced = ok));
    this.beating = written.then(() => void (this.inFlight = false));
  }

  private async write(what: string, sql: string, values: unknown[]): Promise<boolean> {
    const since = this.outages.generation;
    try {
      await this.db.query(sql, values);
      return true;
    } catch (error) {
      if (!this.outages.failed(error, since)) this.log.warn({ err: error, workerId: this.info.id }, `worker presence: ${what} not written`);
      return false;
    }
  }
}

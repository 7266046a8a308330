import * as E from 'fp-ts/lib/Either.js';
import pg from 'pg';
import type { CommandResult, KeyCommand } from '../../commands/key-writer.js';
import type { Logger } from '../../domain/ports/logger.js';
import type { Outages } from '../../domain/ports/outages.js';
import { recheckWriterQuarantines } from '../../projections/quarantine.js';

export interface SweeperOptions {
  /** Between sweeps (default 1000 ms). */
  readonly intervalMs?: number;
  /** Streams handled per sweep and kind, at most (default 500). */
  readonly batch?: number;
  /** The ledger's clock (epoch ms): candidates are found on the clock the decider decides on. */
  readonly clock?: () => number;
  /** [0, 1): the retry jitter of expired started leases. */
  readonly random?: () => number;
  /** Told of a failure the database's absence explains (logged once per outage there, not each sweep). */
  readonly outages?: Outages;
}

/** Session advisory lock held by the one active sweeper. */
const LEADER_LOCK = "hashtextextended('jobledger:sweeper', 0)";

/**
 * Expires the leases past their expiry — every expired holder of a key in one ExpireLeases,
 * promoting as many parked jobs as slots freed — admits scheduled jobs and retries that are
 * due, and serves the lines of keys left with a free slot and jobs under further limits waiting
 * (the second step of a release, when the process that made it died before it). Candidates come from the read models; the decider decides (a candidate that renewed
 * meanwhile decides nothing). One sweeper is active at a time: leadership is a session advisory
 * lock on a dedicated connection, so a crashed leader's lock goes with its connection.
 */
export class Sweeper {
  private timer: NodeJS.Timeout | undefined;
  private leader: pg.Client | undefined;
  private sweeping: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly writer: { executeMany(items: readonly KeyCommand[]): Promise<CommandResult[]> },
    private readonly pool: pg.Pool,
    private readonly log: Logger,
    private readonly options: SweeperOptions = {},
  ) {}

  start(): void {
    this.stopped = false;
    const tick = () => {
      this.sweeping = this.tick().finally(() => {
        this.sweeping = undefined;
        if (!this.stopped) this.timer = setTimeout(tick, this.options.intervalMs ?? 1_000);
      });
    };
    tick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.sweeping;
    await this.leader?.end().catch(() => undefined);
    this.leader = undefined;
  }

  /** Whether this process holds the sweeper's leadership (tests and metrics). */
  get isLeader(): boolean {
    return this.leader !== undefined;
  }

  private async tick(): Promise<void> {
    const generation = this.options.outages?.generation;
    try {
      if (await this.lead()) await this.sweep();
    } catch (error) {
      if (!this.options.outages?.failed(error, generation)) this.log.error({ err: error }, 'sweep failed; trying again next time');
    }
  }

  private async lead(): Promise<boolean> {
    if (this.leader) return true;
    const client = new pg.Client(this.pool.options);
    client.on('error', () => undefined);
    await client.connect();
    const { rows } = await client.query<{ ok: boolean }>(`SELECT pg_try_advisory_lock(${LEADER_LOCK}) AS ok`);
    if (!rows[0]?.ok) {
      await client.end();
      return false;
    }
    // Losing the connection loses the lock: step down, and try to lead again next tick.
    client.on('end', () => {
      if (this.leader === client) this.leader = undefined;
    });
    this.leader = client;
    this.log.info('sweeper: leading');
    return true;
  }

  /**
   * One sweep: ExpireLeases on every stream with an expired started lease, AdmitDue on every
   * stream with a due job, FillSlots on every key whose line waits on further limits with a slot free. Each stream is a submission of its own: the key writer puts them all
   * in one transaction, and one broken or busy key holds up no other (a quarantined one fails
   * alone). Then the key writer's quarantines are read again: those whose stream decodes now end.
   */
  async sweep(): Promise<{ readonly expired: number; readonly admitted: number; readonly served: number; readonly unquarantined: readonly string[] }> {
    const limit = this.options.batch ?? 500;
    const now = (this.options.clock ?? Date.now)();
    const random = this.options.random ?? Math.random;
    const { rows } = await this.pool.query<{ kind: SweepCandidate; stream: string }>(SWEEP_CANDIDATES_SQL, [now, limit]);
    const of = (kind: SweepCandidate) => rows.filter((r) => r.kind === kind).map((r) => r.stream);
    const [expired, due, stranded] = [of('expired'), of('due'), of('stranded')];
    const commands: KeyCommand[] = [
      ...expired.map((stream) => ({ stream, command: { type: 'ExpireLeases', jitter: random() } as const, metadata: { by: 'sweeper' } })),
      ...due.map((stream) => ({ stream, command: { type: 'AdmitDue' } as const, metadata: { by: 'sweeper' } })),
      ...stranded.map((stream) => ({ stream, command: { type: 'FillSlots' } as const, metadata: { by: 'sweeper' } })),
    ];
    const settled = await Promise.allSettled(commands.map((c) => this.writer.executeMany([c])));
    const results: CommandResult[] = [];
    settled.forEach((r, i) => {
      if (r.status === 'fulfilled') results.push(...r.value);
      else if (!this.options.outages?.failed(r.reason)) this.log.error({ err: r.reason, stream: commands[i]!.stream }, 'sweep of a stream failed; trying again next time');
    });
    const count = (type: string) => results.reduce((n, r) => n + (E.isRight(r) ? r.right.events.filter((e) => e.type === type).length : 0), 0);
    const summary = { expired: count('LeaseExpired'), admitted: count('SlotAcquired') + count('JobParked'), served: count('LimitHeld') };
    if (summary.expired + summary.admitted + summary.served > 0) this.log.info(summary, 'sweeper: leases expired, due jobs admitted, stranded lines served');
    const unquarantined = await recheckWriterQuarantines(this.pool);
    if (unquarantined.length > 0) this.log.info({ streams: unquarantined }, 'sweeper: quarantined streams decode again: quarantine over');
    return { ...summary, unquarantined };
  }

}

// Candidates only: the decider decides (a lease renewed meanwhile decides nothing). $1 is now
// on the ledger's clock (epoch ms), the clock the decider decides on; $2 the most streams of each
// kind. One statement, not one per kind: a sweep is one read of the read models (one transaction
// a second beside the workers' commits, whatever kinds of work there are).
//   expired   streams with a started lease expired by $1 (jl_slots_expiry; an admission nobody
//             started has no expiry)
//   due       streams with a scheduled job due by $1 (jl_jobs_due)
//   stranded  keys with a free slot and, in their line, jobs under further limits (a guest, or a
//             job of the key whose guests wait elsewhere): the FillSlots a process that died after
//             a release could not write. Jobs under one limit never wait with a free slot (the
//             release promotes them in its own append), so only jl_limit_jobs' waiters are looked at.
export const SWEEP_CANDIDATES_SQL = `
(SELECT DISTINCT 'expired' AS kind, stream FROM jl_slots WHERE expires_at <= to_timestamp($1::float8 / 1000) LIMIT $2)
UNION ALL
(SELECT DISTINCT 'due', stream FROM jl_jobs WHERE run_at <= to_timestamp($1::float8 / 1000) LIMIT $2)
UNION ALL
(WITH waiting AS (
   SELECT stream FROM jl_limit_jobs WHERE status = 'parked'
   UNION
   SELECT home FROM jl_limit_jobs WHERE status = 'parked'
 )
 SELECT 'stranded', k.stream FROM waiting w JOIN jl_key_stats k ON k.stream = w.stream
 WHERE k.paused_at IS NULL AND k.in_use < k.concurrency_limit AND k.parked > 0
 LIMIT $2)`;

export type SweepCandidate = 'expired' | 'due' | 'stranded';

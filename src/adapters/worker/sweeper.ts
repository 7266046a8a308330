import { performance } from 'node:perf_hooks';
import * as E from 'fp-ts/lib/Either.js';
import type pg from 'pg';
import type { CommandResult, KeyCommand } from '../../commands/key-command.js';
import type { Logger } from '../../domain/ports/logger.js';
import type { Outages } from '../../domain/ports/outages.js';
import { AdvisoryLeader, type AdvisoryLock } from '../../projections/leader.js';
import { recheckWriterQuarantines } from '../../projections/quarantine.js';
import { MAX_LEASE_MS } from '../../domain/values.js';
import { ensureAppendWeeks } from '../postgres/append-weeks.js';
import { LEASE_GRACE_PRUNE_SQL, LEASE_GRACE_SQL } from '../postgres/queries/lease-grace.js';
import { DATABASE_UPTIME_SQL, SWEEP_CANDIDATES_SQL, type SweepCandidate } from '../postgres/queries/sweep-candidates.js';

export interface SweeperOptions {
  /** Between sweeps (default 1000 ms). */
  readonly intervalMs?: number;
  /** Streams handled per sweep and kind, at most (default 500). */
  readonly batch?: number;
  /** The ledger's clock (epoch ms), required: candidates are found on the clock the decider decides on, a test's too. */
  readonly clock: () => number;
  /** [0, 1), required: the retry jitter of expired started leases, the ledger's random source (a seeded test's too). */
  readonly random: () => number;
  /** Told of a failure the database's absence explains (logged once per outage there, not each sweep). */
  readonly outages?: Outages;
}

/** How often the leader makes the ledger's coming weeks (ensureAppendWeeks), by the process's own clock: the weeks are the database's. */
const WEEKS_EVERY_MS = 3_600_000;

/** Session advisory lock held by the one active sweeper. */
const LEADER_LOCK: AdvisoryLock = { key: "hashtextextended('jobledger:sweeper', 0)", values: [] };

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
  private leader: AdvisoryLeader | undefined;
  private sweeping: Promise<void> | undefined;
  private stopped = false;
  /**
   * Since when (the ledger's clock) workers could renew, as far as this sweeper knows: the end of
   * the last outage it saw, or the database's start when it began leading. No lease expires
   * sooner than one lease length after it (ExpireLeases graceFrom, issue 21 item 7).
   */
  private renewableSince = 0;
  /** The process's outage generation at the last sweep: another one means an outage ended in between. */
  private seenGeneration: number | undefined;
  /** A sweep failed because the database did not answer. */
  private outageSeen = false;
  /** Where each kind of candidate stopped last sweep (see SWEEP_CANDIDATES_SQL). */
  private readonly after: Record<SweepCandidate, string> = { expired: '', due: '', stranded: '' };
  /** When (Date.now) this sweeper last made the coming weeks' partitions. */
  private weeksMadeAt = 0;
  /** Told how late each tick started (see onTickLag). */
  private readonly lagListeners = new Set<(lagMs: number) => void>();

  constructor(
    private readonly writer: { executeMany(items: readonly KeyCommand[]): Promise<CommandResult[]> },
    private readonly pool: pg.Pool,
    private readonly log: Logger,
    private readonly options: SweeperOptions,
  ) {}

  start(): void {
    this.stopped = false;
    const tick = (due?: number) => {
      if (due !== undefined) {
        const lagMs = Math.max(0, performance.now() - due);
        for (const listener of this.lagListeners) listener(lagMs);
      }
      this.sweeping = this.tick().finally(() => {
        this.sweeping = undefined;
        const intervalMs = this.options.intervalMs ?? 1_000;
        if (!this.stopped) this.timer = setTimeout(tick, intervalMs, performance.now() + intervalMs);
      });
    };
    tick();
  }

  /**
   * `listener` is told, at each tick after the first, how late it started (ms) against its
   * schedule (the previous tick's end plus intervalMs): the time the event loop kept the timer
   * waiting, during which no lease expired and no due job was admitted (/metrics shows it).
   */
  onTickLag(listener: (lagMs: number) => void): void {
    this.lagListeners.add(listener);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.sweeping;
    await this.leader?.release();
    this.leader = undefined;
  }

  /** Whether this process holds the sweeper's leadership (tests and metrics). */
  get isLeader(): boolean {
    return this.leader?.leading === true;
  }

  private async tick(): Promise<void> {
    const generation = this.options.outages?.generation;
    try {
      if (await this.lead()) {
        await this.sweep();
        if (Date.now() - this.weeksMadeAt >= WEEKS_EVERY_MS) {
          await ensureAppendWeeks(this.pool);
          this.weeksMadeAt = Date.now();
        }
      }
    } catch (error) {
      if (this.options.outages?.failed(error, generation)) this.outageSeen = true;
      else this.log.error({ err: error }, 'sweep failed; trying again next time');
    }
  }

  /** Tries once per tick; a leader whose connection ended (so its lock with it) steps down and tries again next tick. */
  private async lead(): Promise<boolean> {
    if (this.leader?.leading === true) return true;
    // A lost leader's session is over (or ending): make sure, and try on a new one.
    await this.leader?.release();
    this.leader = undefined;
    const leader = await AdvisoryLeader.connect(this.pool.options, LEADER_LOCK);
    let led = false;
    try {
      led = await leader.tryLead();
    } finally {
      if (!led) await leader.release();
    }
    if (!led) return false;
    this.leader = leader;
    // A restart this process did not see (it started after it, or another led then): leases get their grace from the database's start.
    const { rows } = await this.pool.query<{ uptime_ms: number }>(DATABASE_UPTIME_SQL);
    this.renewableSince = Math.max(this.renewableSince, Math.floor(this.options.clock() - rows[0]!.uptime_ms));
    this.log.info('sweeper: leading');
    return true;
  }

  /**
   * One sweep: ExpireLeases on every stream with an expired started lease, AdmitDue on every
   * stream with a due job, FillSlots on every key whose line waits on further limits with a slot free. Each stream is a submission of its own: the key writer puts them all
   * in one transaction, and one broken or busy key holds up no other (a quarantined one fails
   * alone). First the key writer's quarantines are read again: those whose stream decodes now end.
   */
  async sweep(): Promise<{ readonly expired: number; readonly admitted: number; readonly served: number; readonly unquarantined: readonly string[] }> {
    const limit = this.options.batch ?? 500;
    const now = this.options.clock();
    const { random } = this.options;
    // First the key writer's quarantines, read again: a stream that decodes now is over, and its
    // leases (unrenewable until now) get their grace from now (jl_lease_grace), in this very sweep
    // and whichever sweeper leads next.
    const unquarantined = await recheckWriterQuarantines(this.pool, now);
    if (unquarantined.length > 0) this.log.info({ streams: unquarantined }, 'sweeper: quarantined streams decode again: quarantine over');
    const { rows } = await this.pool.query<{ kind: SweepCandidate; stream: string }>(SWEEP_CANDIDATES_SQL, [now, limit, this.after.expired, this.after.due, this.after.stranded]);
    // The database answers: an outage seen since the last sweep (by this sweeper, or any part of the process) ended about now.
    const generation = this.options.outages?.generation ?? 0;
    if (this.outageSeen || (this.seenGeneration !== undefined && generation !== this.seenGeneration)) this.renewableSince = Math.max(this.renewableSince, now);
    this.outageSeen = false;
    this.seenGeneration = generation;
    const of = (kind: SweepCandidate) => {
      const streams = rows.filter((r) => r.kind === kind).map((r) => r.stream);
      this.after[kind] = streams.length < limit ? '' : streams.at(-1)!;
      return streams;
    };
    const [expired, due, stranded] = [of('expired'), of('due'), of('stranded')];
    // When each quarantine ended: a lease gets one lease from the end of its own stream's and its limit keys' (the decider picks).
    const streamGrace = expired.length === 0 ? {} : Object.fromEntries((await this.pool.query<{ stream: string; since_ms: number }>(LEASE_GRACE_SQL)).rows.map((r) => [r.stream, r.since_ms]));
    const grace = {
      ...(this.renewableSince > 0 ? { graceFrom: this.renewableSince } : {}),
      ...(Object.keys(streamGrace).length > 0 ? { streamGrace } : {}),
    };
    const commands: KeyCommand[] = [
      ...expired.map((stream) => ({ stream, command: { type: 'ExpireLeases', jitter: random(), ...grace } as const, metadata: { by: 'sweeper' } })),
      ...due.map((stream) => ({ stream, command: { type: 'AdmitDue' } as const, metadata: { by: 'sweeper' } })),
      ...stranded.map((stream) => ({ stream, command: { type: 'FillSlots' } as const, metadata: { by: 'sweeper' } })),
    ];
    // Each alone: one refused before it is written (a bad command throws) fails no other.
    const settled = await Promise.allSettled(commands.map(async (c) => this.writer.executeMany([c])));
    const results: CommandResult[] = [];
    settled.forEach((r, i) => {
      if (r.status === 'fulfilled') results.push(...r.value);
      else if (!this.options.outages?.failed(r.reason)) this.log.error({ err: r.reason, stream: commands[i]!.stream }, 'sweep of a stream failed; trying again next time');
    });
    const count = (type: string) => results.reduce((n, r) => n + (E.isRight(r) ? r.right.events.filter((e) => e.type === type).length : 0), 0);
    const summary = { expired: count('LeaseExpired'), admitted: count('SlotAcquired') + count('JobParked'), served: count('LimitHeld') };
    if (summary.expired + summary.admitted + summary.served > 0) this.log.info(summary, 'sweeper: leases expired, due jobs admitted, stranded lines served');
    await this.pool.query(LEASE_GRACE_PRUNE_SQL, [now - MAX_LEASE_MS]);
    return { ...summary, unquarantined };
  }
}

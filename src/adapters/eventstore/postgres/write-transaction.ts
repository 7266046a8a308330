import type pg from 'pg';
import type { KeyEvent } from '../../../domain/events.js';
import {
  type GlobalPosition,
  type RecordedEvent,
  type Snapshot,
  type StreamRevision,
} from '../../../domain/ports/event-store.js';
import {
  CommitOutcomeUnknownError,
  TransientWriteError,
  type Commit,
  type Committed,
  type HandedOffJob,
  type LockRequest,
  type LockedStream,
  type Claim,
  type DispatchMessage,
  type WriteTransaction,
} from '../../../domain/ports/ledger-store.js';
import { decodeRecorded } from '../../../domain/recorded.js';
import type { ProjectedEvent, Projection, Statement } from '../../../projections/projection.js';
import { keyOfStream } from '../../../projections/projection.js';
import { WRITER, quarantineOf, recordQuarantines, type Quarantine } from '../../../projections/quarantine.js';
import { projectAll, statementName } from '../../../projections/apply.js';
import { NOTIFY_QUEUES_SQL, WAKE_QUEUES_SQL, WAKE_SQL } from '../../../projections/dispatcher.js';
import { ENSURE_WEEKS_SQL } from '../../postgres/append-weeks.js';
import { parseSnapshotState } from '../../postgres/postgres-snapshot-store.js';
import { claimCandidates, claimOnShard, claimStatement } from '../../queue/job-queue.js';
import { eventPrepare, eventsOfRow, type LedgerRow } from '../../../projections/ledger-rows.js';
import {
  ADVISORY_SQL,
  BEGIN_DISTRIBUTED_SQL,
  BEGIN_SQL,
  DELTAS_ON_SHARD_SQL,
  DELTAS_SQL,
  LOCK_ON_SHARD_SQL,
  LOCK_ROWS_SQL,
  LOCK_SQL,
  NOTIFY_EVENTS_SQL,
  QUARANTINED_SQL,
  READ_CHECK_ON_SHARD_SQL,
  READ_CHECK_SQL,
  SAVE_KEPT_SNAPSHOTS_ON_SHARD_SQL,
  SAVE_KEPT_SNAPSHOTS_SQL,
  SAVE_SNAPSHOTS_SQL,
  SNAPSHOTS_ON_SHARD_SQL,
  SNAPSHOTS_SQL,
  APPEND_ROWS_RETURNING_SQL,
  APPEND_ROWS_SQL,
  CREATE_STREAMS_SQL,
  JOB_HEADS_ON_SHARD_SQL,
  MOVE_STREAMS_SQL,
  UNIQUE_IDS_SQL,
  WRITE_FLUSH_SQL,
  WRITE_RETURNING_SQL,
  XID_SQL,
  isJobStream,
  wireAppends,
  type LockRow,
} from './stream-sql.js';
import type { ShardMap } from './shard-map.js';
import { isAbortedTransaction, isMissingWeek, isPgError, mapError, named } from './write-errors.js';

// One transaction of the key writer (src/commands/key-writer.ts), on one pipelining connection,
// in three round trips at most:
//   read    BEGIN; the dispatch reads (the jobs they claim name streams to lock)
//   lock    [BEGIN;] ADVISORY_SQL; LOCK_SQL (and, for a stream it waited for, SNAPSHOTS_SQL; DELTAS_SQL)
//   commit  WRITE_*_SQL; the inline projections' statements; quarantines, snapshots, NOTIFY; COMMIT
// Every statement of a round trip goes out at once; none of a later one is sent before the
// earlier one's results are in, since the writer decides on them. A statement that fails aborts
// the transaction, so everything after it is refused and COMMIT answers ROLLBACK: nothing of the
// flush is written (commit() then throws the first error).

export interface WriteTransactionOptions {
  /** Applied to every appended event of the streams they handle, in the transaction (inline mode). */
  readonly inline: readonly Projection[];
  /** NOTIFY EVENTS_CHANNEL once per commit (only where someone subscribes: async runners). */
  readonly notifyEvents: boolean;
  readonly schemaVersion: number;
  /**
   * On a distributed ledger (Citus): where each stream lives. Each shard's streams are then locked,
   * read and checked by statements of their own (a row lock must stay on one shard), the
   * transaction's id is the coordinator's (XID_SQL) wherever a statement runs, and a read of the
   * dispatch queue picks its rows first and locks them shard by shard (claimOnShards).
   */
  readonly shards?: ShardMap;
}

const NO_STREAM = -1;
const revisionOf = (r: StreamRevision | 'no_stream' | undefined): number => (r === undefined || r === 'no_stream' ? NO_STREAM : r);

export class PgWriteTransaction implements WriteTransaction {
  private began = false;
  private ended = false;
  private broken = false;
  /** This transaction's id, known once it locked. */
  private xid: bigint | undefined;

  constructor(
    private readonly client: pg.PoolClient,
    private readonly options: WriteTransactionOptions,
  ) {
    // A connection lost while the transaction holds it: pg emits 'error' on the client, which
    // nobody else listens to while it is checked out (an unheard 'error' would end the process).
    // The query in flight fails too; the client is thrown away on release.
    client.on('error', this.lost);
  }

  private readonly lost = (): void => {
    this.broken = true;
  };

  private release(): void {
    // A client given back broken is ended by the pool, which no longer listens to it: a late
    // error of its dying connection (the FATAL of a terminated backend) MUST still be heard.
    if (!this.broken) this.client.off('error', this.lost);
    this.client.release(this.broken);
  }

  async read(claims: readonly Claim[]): Promise<readonly (readonly DispatchMessage[])[]> {
    if (this.options.shards !== undefined) return Promise.all(claims.map((claim) => this.claimOnShards(claim, this.options.shards!)));
    const results = await this.run(claims.map(claimStatement));
    return results.map((r) => r.rows as DispatchMessage[]);
  }

  /**
   * A claim on a distributed ledger: FOR UPDATE SKIP LOCKED must stay on one shard, and a queue's
   * rows are on every shard. Its candidates are read first, unlocked, across the shards (the
   * oldest admissions, more than asked for: another reader may take some), then each shard's
   * candidates are locked SKIP LOCKED by a statement of their own, which checks them again
   * (still claimable, else dropped), and the oldest `qty` of those locked are claimed.
   */
  private async claimOnShards(claim: Claim, shards: ShardMap): Promise<DispatchMessage[]> {
    const [candidates] = await this.run([claimCandidates(claim)]);
    const rows = candidates!.rows as { jobId: string; stream: string }[];
    if (rows.length === 0) return [];
    const streams = [...new Set(rows.map((r) => r.stream))].sort(byName);
    const groups = await shards.groups(this.client, streams);
    const jobsOf = new Map<string, string[]>();
    for (const r of rows) jobsOf.set(r.stream, [...(jobsOf.get(r.stream) ?? []), r.jobId]);
    const locked = await this.run(groups.map((group) => claimOnShard(claim, group, group.flatMap((stream) => jobsOf.get(stream)!))));
    const claimed = locked.flatMap((r) => r.rows as (DispatchMessage & { acquiredAt: string })[]);
    // The oldest admissions first, as one statement would: each shard's came in that order.
    claimed.sort((a, b) => Number(a.acquiredAt) - Number(b.acquiredAt));
    return claimed.slice(0, claim.qty).map(({ acquiredAt: _, ...message }) => message);
  }

  async lock(requests: readonly LockRequest[]): Promise<ReadonlyMap<string, LockedStream>> {
    const after = new Map<string, number | null>();
    for (const r of requests) after.set(r.stream, r.after === undefined ? null : revisionOf(r.after));
    const streams = [...after.keys()].sort(byName);
    const jobs = streams.filter(isJobStream);
    const shards = this.options.shards;
    const groups = shards === undefined ? [streams] : await shards.groups(this.client, streams);
    const results = await this.run([
      ...(jobs.length > 0 ? [{ text: ADVISORY_SQL, values: [jobs] }] : []),
      ...(shards === undefined ? [] : [{ text: XID_SQL, values: [] }]),
      ...groups.map((group) => ({ text: shards === undefined ? LOCK_SQL : LOCK_ON_SHARD_SQL, values: [group, group.map((s) => after.get(s)), this.options.schemaVersion] })),
    ]);
    if (shards !== undefined) this.xid ??= BigInt((results[jobs.length > 0 ? 1 : 0]!.rows[0] as { xid: string }).xid);
    const found = new Map<string, { revision: number; writer: bigint; snapshot: number | null; events: RecordedEvent[] }>();
    for (const row of results.slice(results.length - groups.length).flatMap((r) => r.rows as LockRow[])) {
      this.xid ??= BigInt(row.xid);
      let f = found.get(row.locked);
      if (f === undefined) {
        f = { revision: Number(row.head), writer: BigInt(row.writer), snapshot: row.snapshot_revision === null ? null : Number(row.snapshot_revision), events: [] };
        found.set(row.locked, f);
      }
      if (row.position !== null) f.events.push(...eventsOfRow(row as unknown as LedgerRow, Math.max(after.get(row.locked) ?? -1, f.snapshot ?? -1) + 1));
    }
    // LOCK_SQL read the rows in the snapshot it started with: a stream whose row lock it had to
    // wait for (its writer committed meanwhile) comes back short of its locked revision, and so
    // does one with a newer snapshot (whose state it does not carry). Those are read again, now
    // that they are held. (A job stream's advisory lock was held before LOCK_SQL started.)
    const again = streams.filter((s) => {
      const f = found.get(s);
      const from = after.get(s);
      if (f === undefined || from === null) return false;
      const last = f.events.at(-1)?.revision ?? (f.snapshot ?? from);
      return f.snapshot !== null || last !== f.revision;
    });
    const snaps = new Map<string, Snapshot>();
    if (again.length > 0) {
      const regroups = shards === undefined ? [again] : await shards.groups(this.client, again);
      const reads = await this.run(
        regroups.flatMap((group) => {
          const wanted = [group, group.map((s) => after.get(s)), this.options.schemaVersion];
          return [
            { text: shards === undefined ? SNAPSHOTS_SQL : SNAPSHOTS_ON_SHARD_SQL, values: wanted },
            { text: shards === undefined ? DELTAS_SQL : DELTAS_ON_SHARD_SQL, values: wanted },
          ];
        }),
      );
      const snapshots = { rows: reads.filter((_, i) => i % 2 === 0).flatMap((r) => r.rows) };
      const deltas = { rows: reads.filter((_, i) => i % 2 === 1).flatMap((r) => r.rows) };
      for (const r of snapshots.rows as { stream: string; revision: string; state: string }[]) {
        snaps.set(r.stream, { stream: r.stream, revision: Number(r.revision), schemaVersion: this.options.schemaVersion, state: parseSnapshotState(r.state) });
      }
      for (const stream of again) found.get(stream)!.events = [];
      for (const row of deltas.rows as LedgerRow[]) {
        found.get(row.stream)!.events.push(...eventsOfRow(row, Math.max(after.get(row.stream)!, snaps.get(row.stream)?.revision ?? -1) + 1));
      }
    }
    const out = new Map<string, LockedStream>();
    for (const stream of streams) {
      const f = found.get(stream);
      out.set(stream, {
        stream,
        revision: f === undefined ? 'no_stream' : f.revision,
        snapshot: snaps.get(stream),
        events: f?.events ?? [],
        // See streams.transaction_id: a younger last writer means our events would sort first.
        deferred: f !== undefined && this.xid !== undefined && f.writer > this.xid,
      });
    }
    return out;
  }

  async commit(commit: Commit): Promise<Committed> {
    const statements: Statement[] = [];
    const shards = this.options.shards;
    // One shard's streams a statement (a distributed ledger), or all of them in one.
    const byShard = async (streams: readonly string[]): Promise<string[][]> => (shards === undefined ? [[...streams]] : shards.groups(this.client, streams));
    // The coordinator's transaction id, before the statements that carry it (WRITE_*_DISTRIBUTED_SQL).
    if (shards !== undefined && this.xid === undefined) this.xid = BigInt(((await this.run([{ text: XID_SQL, values: [] }]))[0]!.rows[0] as { xid: string }).xid);
    if (commit.lockFirst?.length) {
      const streams = [...new Set(commit.lockFirst)].sort(byName);
      // A job stream this commit creates is not locked: nobody else can have decided on it, and
      // a second creator fails on appends_pkey (see WRITE_SQL). Unkeyed enqueues lock nothing.
      const creates = new Set(commit.appends.filter((a) => a.expected === 'no_stream').map((a) => a.stream));
      const jobs = streams.filter((s) => isJobStream(s) && !creates.has(s));
      const rows = streams.filter((s) => !isJobStream(s));
      if (jobs.length > 0) statements.push({ text: ADVISORY_SQL, values: [jobs] });
      if (rows.length > 0) for (const group of await byShard(rows)) statements.push({ text: LOCK_ROWS_SQL, values: [group] });
    }
    if (commit.readChecks?.length) {
      const checks = [...commit.readChecks].sort((a, b) => byName(a.stream, b.stream));
      const expected = new Map(checks.map((c) => [c.stream, revisionOf(c.revision)]));
      for (const group of await byShard(checks.map((c) => c.stream))) {
        statements.push({ text: shards === undefined ? READ_CHECK_SQL : READ_CHECK_ON_SHARD_SQL, values: [group, group.map((s) => expected.get(s))] });
      }
    }
    const projected: ProjectedEvent[] = [];
    const handled = new Map<string, boolean>();
    const { wire, uniques } = wireAppends(commit.appends, (append, i, revision, metadata) => {
      let handles = handled.get(append.stream);
      if (handles === undefined) handled.set(append.stream, (handles = this.options.inline.some((p) => p.handles(append.stream))));
      if (!handles) return;
      const e = append.events[i]!;
      const event = append.decided?.[i] ?? decodeRecorded({ stream: append.stream, revision, type: e.type, data: e.data, metadata });
      projected.push({ event: event as KeyEvent, stream: append.stream, revision, key: keyOfStream(append.stream), commit: this.xid ?? 0n });
    });
    let written = -1;
    if (wire.length > 0 && shards === undefined) {
      const rowStreams = wire.filter((w) => !isJobStream(w.stream)).map((w) => w.stream);
      written = statements.length;
      statements.push({ text: commit.positions === true ? WRITE_RETURNING_SQL : WRITE_FLUSH_SQL, values: [JSON.stringify(wire), rowStreams, uniques] });
    }
    if (wire.length > 0 && shards !== undefined) {
      // The parts of WRITE_SQL, each a statement Citus plans (stream-sql.ts MOVE_STREAMS_SQL).
      const json = JSON.stringify(wire);
      const xid = String(this.xid);
      const moving = wire.filter((w) => !isJobStream(w.stream) && w.expected >= 0).map((w) => w.stream);
      const jobs = new Map(wire.filter((w) => isJobStream(w.stream)).map((w) => [w.stream, w.expected]));
      if (moving.length > 0) statements.push({ text: MOVE_STREAMS_SQL, values: [json, moving, xid] });
      for (const group of jobs.size === 0 ? [] : await byShard([...jobs.keys()].sort(byName))) statements.push({ text: JOB_HEADS_ON_SHARD_SQL, values: [group, group.map((s) => jobs.get(s)), xid] });
      if (wire.some((w) => !isJobStream(w.stream) && w.expected < 0)) statements.push({ text: CREATE_STREAMS_SQL, values: [json, xid] });
      written = statements.length;
      statements.push({ text: commit.positions === true ? APPEND_ROWS_RETURNING_SQL : APPEND_ROWS_SQL, values: [json, xid] });
      if (uniques.length > 0) statements.push({ text: UNIQUE_IDS_SQL, values: [uniques] });
    }
    // On a distributed ledger the wake-ups are notified once committed (dispatcher.ts WAKE_QUEUES_SQL).
    const wakes = (s: Statement): Statement => (shards !== undefined && s.text === WAKE_SQL ? { text: WAKE_QUEUES_SQL, values: s.values, returns: 'queues' } : s);
    statements.push(...projectAll(this.options.inline, projected).map(wakes));
    const quarantined = (commit.quarantine ?? []).map(quarantineOf).filter((q): q is Quarantine => q !== undefined);
    if (quarantined.length > 0) statements.push(recordQuarantines(WRITER, quarantined));
    if (commit.snapshots?.length) {
      statements.push({
        text: SAVE_SNAPSHOTS_SQL,
        values: [commit.snapshots.map((s) => s.stream), commit.snapshots.map((s) => s.schemaVersion), commit.snapshots.map((s) => s.revision), commit.snapshots.map((s) => JSON.stringify(s.state))],
      });
      const kept = new Map(commit.snapshots.filter((s) => s.keep !== undefined).map((s) => [s.stream, s]));
      for (const group of kept.size === 0 ? [] : await byShard([...kept.keys()])) {
        const each = group.map((stream) => kept.get(stream)!);
        statements.push({
          text: shards === undefined ? SAVE_KEPT_SNAPSHOTS_SQL : SAVE_KEPT_SNAPSHOTS_ON_SHARD_SQL,
          values: [group, each.map((s) => s.revision), each.map((s) => s.keep!.spacing), each.map((s) => s.schemaVersion)],
        });
      }
    }
    if (this.options.notifyEvents && wire.length > 0) statements.push({ text: NOTIFY_EVENTS_SQL, values: [] });
    statements.push({ text: 'COMMIT', values: [] });
    const results = await this.run(statements, {
      ending: true,
      afterCommit: (committed) => {
        const queues = statements.flatMap((s, i) => (s.returns === 'queues' ? (committed[i]!.rows as { queue: string }[]).map((r) => r.queue) : []));
        return queues.length === 0 ? [] : [{ text: NOTIFY_QUEUES_SQL, values: [[...new Set(queues)]] }];
      },
    });
    if (results.at(-1)!.command !== 'COMMIT') throw new TransientWriteError('COMMIT rolled back');
    const handedOff = new Map<string, HandedOffJob>();
    statements.forEach((s, i) => {
      if (s.returns === 'handedOff') for (const job of results[i]!.rows as HandedOffJob[]) handedOff.set(job.jobId, job);
    });
    // Each written row, by stream: an event's position is its row's and its index in it.
    const rows = new Map<string, { first: number; position: bigint; xid: bigint }>();
    if (wire.length > 0 && commit.positions === true) {
      for (const row of results[written]!.rows as { stream: string; revision: string; position: string; xid: string }[]) {
        rows.set(row.stream, { first: Number(row.revision), position: BigInt(row.position), xid: BigInt(row.xid) });
      }
    }
    const positionOf = (stream: string, revision: StreamRevision): GlobalPosition | undefined => {
      const row = rows.get(stream);
      return row === undefined || revision < row.first ? undefined : { commit: row.xid, prepare: eventPrepare(row.position, revision - row.first) };
    };
    return { handedOff, positionOf };
  }

  async quarantined(streams: readonly string[]): Promise<ReadonlySet<string>> {
    const [result] = await this.run([{ text: QUARANTINED_SQL, values: [streams] }]);
    return new Set((result!.rows as { stream: string }[]).map((r) => r.stream));
  }

  async rollback(): Promise<void> {
    if (this.ended) return;
    this.ended = true;
    if (this.began && !this.broken) await this.client.query('ROLLBACK').catch(() => (this.broken = true));
    this.release();
  }

  /**
   * Sends the statements at once (BEGIN first if the transaction has not begun) and waits for all
   * of them; throws the first error. `ending`: the last one ends the transaction (COMMIT), so the
   * connection goes back to the pool whatever happens.
   */
  private async run(
    statements: readonly Statement[],
    { ending = false, afterCommit }: { readonly ending?: boolean; readonly afterCommit?: (results: readonly pg.QueryResult[]) => readonly Statement[] } = {},
  ): Promise<pg.QueryResult[]> {
    if (this.ended) throw new Error('write transaction already ended');
    const query = (s: Statement): Promise<pg.QueryResult> =>
      s.values.length === 0 ? this.client.query(s.text) : this.client.query({ name: statementName(s.text), text: s.text, values: s.values as unknown[] });
    const all: Statement[] = this.began ? [...statements] : [{ text: this.options.shards === undefined ? BEGIN_SQL : BEGIN_DISTRIBUTED_SQL, values: [] }, ...statements];
    this.began = true;
    const settled = (this.client as { pipeline?: boolean }).pipeline === true ? await this.pipelined(all, query) : await this.oneByOne(all, query, ending);
    if (ending) {
      this.ended = true;
      // A COMMIT that never answered leaves the transaction's fate unknown and the connection unusable.
      if (settled.some((r) => r.status === 'rejected' && !isPgError(r.reason))) this.broken = true;
      // The week's partition is missing (no process of the ledger opened or swept for a week):
      // the transaction is over (rolled back); make the weeks, and the writer runs it again.
      if (!this.broken && settled.some((r) => r.status === 'rejected' && isMissingWeek(r.reason))) {
        await this.client.query(ENSURE_WEEKS_SQL).catch(() => (this.broken = true));
      }
      // Once committed, on the same connection: a failure of these changes nothing committed.
      if (afterCommit !== undefined && !this.broken && settled.every((r) => r.status === 'fulfilled')) {
        const results = settled.slice(all.length - statements.length).map((r) => (r as PromiseFulfilledResult<pg.QueryResult>).value);
        for (const s of afterCommit(results)) await this.client.query(s.text, s.values as unknown[]).catch(() => undefined);
      }
      this.release();
    }
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected' && !isAbortedTransaction(r.reason)) ??
      settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    // No statement was refused, yet an answer is missing: the COMMIT may have landed or not.
    if (failed && ending && !settled.some((r) => r.status === 'rejected' && isPgError(r.reason))) throw new CommitOutcomeUnknownError(String((failed.reason as Error)?.message ?? failed.reason));
    if (failed) throw mapError(named(failed.reason, all[settled.indexOf(failed)]));
    return settled.slice(all.length - statements.length).map((r) => (r as PromiseFulfilledResult<pg.QueryResult>).value);
  }

  /** All at once: a pipelining client writes each statement as it is queued; corked, they leave in one write. */
  private async pipelined(all: readonly Statement[], query: (s: Statement) => Promise<pg.QueryResult>): Promise<PromiseSettledResult<pg.QueryResult>[]> {
    const stream = (this.client as unknown as { connection?: { stream?: { cork?(): void; uncork?(): void } } }).connection?.stream;
    const sent: Promise<pg.QueryResult>[] = [];
    stream?.cork?.();
    try {
      for (const s of all) sent.push(query(s));
    } finally {
      stream?.uncork?.();
    }
    return Promise.allSettled(sent);
  }

  /**
   * A client of a pool the caller made without `pipeline`: one statement after the other, up to
   * the first that fails (then, for a commit, a ROLLBACK instead of the rest).
   */
  private async oneByOne(all: readonly Statement[], query: (s: Statement) => Promise<pg.QueryResult>, ending: boolean): Promise<PromiseSettledResult<pg.QueryResult>[]> {
    const settled: PromiseSettledResult<pg.QueryResult>[] = [];
    for (const s of all) {
      try {
        settled.push({ status: 'fulfilled', value: await query(s) });
      } catch (reason) {
        settled.push({ status: 'rejected', reason });
        if (ending && isPgError(reason) && s.text !== 'COMMIT') await this.client.query('ROLLBACK').catch(() => (this.broken = true));
        break;
      }
    }
    return settled;
  }
}

const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

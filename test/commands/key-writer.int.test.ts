import { existsSync, statSync } from 'node:fs';
import net from 'node:net';
import * as E from 'fp-ts/lib/Either.js';
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PostgresEventStore } from '../../src/adapters/eventstore/postgres/postgres-event-store.js';
import { PostgresSnapshotStore } from '../../src/adapters/postgres/postgres-snapshot-store.js';
import { projectionMode } from '../../src/adapters/postgres/projection-mode.js';
import { enqueueMany, enqueuedEventId, keyEventId, type EnqueueInput, type Enqueued } from '../../src/commands/enqueue.js';
import type { CommandResult, KeyCommand } from '../../src/commands/key-command.js';
import { ConflictRetriesExhaustedError, type KeyWriterOptions } from '../../src/commands/key-writer-options.js';
import { KeyWriter } from '../../src/commands/key-writer.js';
import type { Command, JobSpec } from '../../src/domain/commands.js';
import { decide } from '../../src/domain/decide/index.js';
import type { KeyEvent } from '../../src/domain/events.js';
import { KEY_STATE_SCHEMA_VERSION, apply, draftOf, fold, holders, initialKeyState, jobsIn, type KeyState } from '../../src/domain/key-state.js';
import { DuplicateEventIdError, type EventStore, type RecordedEvent } from '../../src/domain/ports/event-store.js';
import { StaleStateError, TransientWriteError, type EventProbe, type HandedOffJob, type LedgerStore, type LockedStream, type WriteTransaction } from '../../src/domain/ports/ledger-store.js';
import { silentLogger } from '../../src/domain/ports/logger.js';
import { EventDecodeError, decodeRecorded } from '../../src/domain/recorded.js';
import { keyStream } from '../../src/domain/streams.js';
import { ValidationError } from '../../src/domain/values.js';
import { createDispatcher } from '../../src/projections/dispatcher.js';
import { createReadModelProjections } from '../../src/projections/read-models.js';
import { runProcesses } from '../support/processes.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/database.js';
import { until } from '../support/until.js';

// The key writer's flush on real PostgreSQL, with real concurrency: writers on pools of their
// own (as processes would be), writers in other OS processes (test/fixtures/key-writer-process.mjs,
// on the built dist/), a writer's own flushes in flight at once on disjoint streams, transactions
// of the test holding stream rows to stop a flush where the test wants it, a TCP proxy to cut a
// connection or lose a COMMIT's answer. Nothing of the storage is mocked; a writer's LedgerStore
// is wrapped only to count its transactions and see what its locks returned.
//
// Every stream is checked by folding it event by event (foldChecked): holders <= limit after
// each admission, each lease admitted, started and released at most once, no idle capacity
// while jobs wait at the end of each transaction, revisions contiguous, and the global order
// (transaction id, position) following the stream order (the xid hazard, streams.transaction_id).
//
// FAILURE-MODES.md rows guarded here: #1 and #6 (a release re-decides on the current revision
// and promotes), #9 (a bulk enqueue is admitted per key), #15 (a race means a conflict and a
// re-decision, never two winners), #19 partly (a lost connection reruns the flush; an unknown
// COMMIT outcome must not be re-decided into a wrong answer).

let db: MigratedDatabase;
let reader: PostgresEventStore;
const opened: Harness[] = [];

beforeAll(async () => {
  db = await createMigratedDatabase(8);
  reader = new PostgresEventStore(db.pool);
});

afterAll(async () => {
  await Promise.allSettled(opened.map((h) => h.close()));
  await db?.drop();
});

/** 03:00 UTC, 30 Nov 2026: every writer's clock unless a test moves it. */
const T0 = Date.UTC(2026, 10, 30, 3, 0, 0);
const clock = { now: T0 };

// ---------------------------------------------------------------- harness

/** The writer's LedgerStore, passed through: counts transactions and keeps what each lock returned and each failure. */
class Transactions implements LedgerStore {
  /** begin() calls, counted before the connection is there: a flush that started shows at once. */
  asked = 0;
  begun = 0;
  committed = 0;
  readonly failures: unknown[] = [];
  readonly locks: LockedStream[][] = [];

  constructor(private readonly inner: LedgerStore) {}

  recorded(probe: EventProbe): Promise<boolean> {
    return this.inner.recorded(probe);
  }

  handedOffJobs(jobs: Parameters<LedgerStore['handedOffJobs']>[0]): Promise<readonly HandedOffJob[]> {
    return this.inner.handedOffJobs(jobs);
  }

  async begin(): Promise<WriteTransaction> {
    this.asked++;
    const tx = await this.inner.begin();
    this.begun++;
    const failed = (error: unknown) => {
      this.failures.push(error);
      throw error;
    };
    return {
      read: (reads) => tx.read(reads).catch(failed),
      quarantined: (streams) => tx.quarantined(streams).catch(failed),
      lock: async (requests) => {
        const locked = await tx.lock(requests).catch(failed);
        this.locks.push([...locked.values()]);
        return locked;
      },
      commit: async (commit) => {
        const committed = await tx.commit(commit).catch(failed);
        this.committed++;
        return committed;
      },
      rollback: () => tx.rollback(),
    };
  }

  get rolledBack(): number {
    return this.begun - this.committed;
  }
}

interface Harness {
  readonly name: string;
  readonly pool: pg.Pool;
  readonly store: PostgresEventStore;
  readonly tx: Transactions;
  readonly writer: KeyWriter;
  /** Streams and revisions the writer's EventStore was asked to read (load, a snapshot that does not decode). */
  readonly reads: { stream: string; fromRevision: number | undefined }[];
  enqueue(inputs: readonly EnqueueInput[]): Promise<Enqueued[]>;
  close(): Promise<void>;
}

/**
 * A key writer wired as src/adapters/ledger.ts wires it, on a pool of its own (application_name
 * = name, so the test can find its backends): the store with the inline read models and
 * dispatcher, keyEventId, snapshots.
 */
const openWriter = (
  name: string,
  options: KeyWriterOptions & {
    readonly url?: string;
    readonly max?: number;
    /**
     * Give every client of the pool an 'error' listener of the test's own, so a connection the
     * test cuts under a flush does not end as an uncaught 'error' event (the writer does not
     * listen on the client it has checked out: see "a connection lost while a flush holds it").
     */
    readonly tolerateClientErrors?: boolean;
  } = {},
): Harness => {
  const { url = db.url, max = 3, tolerateClientErrors = false, ...writerOptions } = options;
  const pool = new pg.Pool({ connectionString: url, max, pipeline: true, application_name: name } as pg.PoolConfig);
  pool.on('error', () => undefined);
  if (tolerateClientErrors) pool.on('connect', (client) => client.on('error', () => undefined));
  const store = new PostgresEventStore(pool, { inline: [createReadModelProjections(), createDispatcher()] });
  const tx = new Transactions(store);
  const reads: Harness['reads'] = [];
  const events = Object.create(store) as PostgresEventStore;
  events.readStream = (stream, opts) => {
    reads.push({ stream, fromRevision: opts?.fromRevision });
    return store.readStream(stream, opts);
  };
  const writer = new KeyWriter(tx, events as EventStore, {
    clock: () => clock.now,
    random: () => 0.5,
    logger: silentLogger,
    snapshots: new PostgresSnapshotStore(pool),
    snapshotEvery: 0,
    eventId: keyEventId,
    ...writerOptions,
  });
  let closed = false;
  const harness: Harness = {
    name,
    pool,
    store,
    tx,
    writer,
    reads,
    enqueue: (inputs) => enqueueMany(writer, inputs, { now: () => clock.now, recorded: (ids) => store.recordedEventIds(ids) }),
    close: async () => {
      if (closed) return;
      closed = true;
      await writer.drain();
      await store.close();
      await pool.end();
    },
  };
  opened.push(harness);
  return harness;
};

const job = (jobId: string, extra: Partial<JobSpec> = {}): JobSpec => ({
  jobId,
  name: 'work',
  args: null,
  queue: 'default',
  priority: 0,
  maxAttempts: 3,
  runAt: null,
  ...extra,
});

const enqueueCmd = (jobId: string, limit = 1, extra: Partial<JobSpec> = {}): Command => ({ type: 'Enqueue', limit, job: job(jobId, extra) });

const eventsOf = (stream: string): Promise<RecordedEvent[]> => reader.readStream(stream);

const count = async (sql: string, values: unknown[] = []): Promise<number> => Number((await db.pool.query<{ n: string }>(sql, values)).rows[0]!.n);

const eventCount = () => count('SELECT count(*) AS n FROM events');

const right = (result: CommandResult) => {
  if (E.isLeft(result)) throw new Error(`refused: ${JSON.stringify(result.left)}`);
  return result.right;
};

/** The lease the decision gave `jobId` (SlotAcquired or JobPromoted among its events). */
const leaseIn = (events: readonly KeyEvent[], jobId: string): string => {
  const e = events.find((x) => (x.type === 'SlotAcquired' || x.type === 'JobPromoted') && x.data.jobId === jobId);
  if (e === undefined || !('leaseId' in e.data)) throw new Error(`no admission of ${jobId} in ${JSON.stringify(events)}`);
  return e.data.leaseId;
};

const stateOf = (events: readonly RecordedEvent[]): KeyState => fold(initialKeyState, events.map(decodeRecorded));

/** Rejects if `promise` has not settled within `ms`: for a step that must complete while something else is held. */
const within = <T>(promise: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what}: not done within ${ms} ms`)), ms).unref())]);

/** Whether `promise` is still pending after the event loop has turned (what it waits for is elsewhere). */
const pending = async (promise: Promise<unknown>): Promise<boolean> => {
  let settled = false;
  promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await new Promise((r) => setImmediate(r));
  return !settled;
};

/**
 * Folds the stream event by event and checks what every flush must keep (see the file's header).
 * Returns the final state.
 */
const foldChecked = async (stream: string): Promise<{ state: KeyState; events: RecordedEvent[] }> => {
  const events = await eventsOf(stream);
  expect(events.map((e) => e.revision), `${stream}: revisions`).toEqual(events.map((_, i) => i));
  for (let i = 1; i < events.length; i++) {
    const [a, b] = [events[i - 1]!.position, events[i]!.position];
    const ordered = a.commit < b.commit || (a.commit === b.commit && a.prepare < b.prepare);
    expect(ordered, `${stream}@${i}: global order (${a.commit},${a.prepare}) then (${b.commit},${b.prepare}) against the stream order`).toBe(true);
  }
  const d = draftOf(initialKeyState);
  const admitted = new Set<string>();
  const started = new Set<string>();
  const released = new Set<string>();
  events.forEach((recorded, i) => {
    const event = decodeRecorded(recorded);
    apply(d, event);
    const at = `${stream}@${recorded.revision} ${event.type}`;
    switch (event.type) {
      case 'SlotAcquired':
      case 'JobPromoted':
        expect(d.holding, `${at}: holders against limit ${d.limit}`).toBeLessThanOrEqual(d.limit);
        expect(admitted.has(event.data.leaseId), `${at}: lease admitted twice`).toBe(false);
        admitted.add(event.data.leaseId);
        break;
      case 'JobStarted':
        expect(admitted.has(event.data.leaseId), `${at}: started a lease never admitted`).toBe(true);
        expect(started.has(event.data.leaseId), `${at}: lease started twice`).toBe(false);
        started.add(event.data.leaseId);
        break;
      case 'SlotReleased':
        expect(admitted.has(event.data.leaseId), `${at}: released a lease never admitted`).toBe(true);
        expect(released.has(event.data.leaseId), `${at}: lease released twice`).toBe(false);
        released.add(event.data.leaseId);
        break;
    }
    expect(holders(d).length, `${at}: holding count`).toBe(d.holding);
    const endOfTransaction = events[i + 1]?.position.commit !== recorded.position.commit;
    if (endOfTransaction) {
      // Every decision of the transaction is complete here: nothing half-way, no idle slot while jobs wait (#1, #6).
      expect(jobsIn(d, 'pending').length + jobsIn(d, 'finishing').length, `${at}: transient job status left`).toBe(0);
      if (jobsIn(d, 'parked').length > 0) expect(d.holding, `${at}: parked jobs beside a free slot`).toBeGreaterThanOrEqual(d.limit);
    }
  });
  return { state: d, events };
};

interface Held {
  readonly pid: number;
  /** Resolves once `n` other backends wait for this transaction. */
  waiters(n?: number): Promise<number[]>;
  release(): Promise<void>;
}

/** A transaction of the test's own holding the row lock of each stream (as a long operator transaction would) until release(). */
const holdStreams = async (...streams: string[]): Promise<Held> => {
  const client = await db.pool.connect();
  await client.query('BEGIN');
  const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid FROM streams WHERE stream = ANY($1) ORDER BY stream FOR UPDATE', [streams]);
  if (rows.length !== streams.length) throw new Error(`holdStreams: ${streams.join(', ')} must exist`);
  const pid = rows[0]!.pid;
  let released = false;
  const blocked = async () =>
    (await db.pool.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))', [pid])).rows.map((r) => r.pid);
  return {
    pid,
    waiters: (n = 1) => until(blocked, (pids) => pids.length >= n, `${n} backend(s) waiting for the lock on ${streams.join(', ')}`, 15_000),
    release: async () => {
      if (released) return;
      released = true;
      await client.query('ROLLBACK');
      client.release();
    },
  };
};

/** Every transaction id of these events, in order of first appearance. */
const transactionsOf = (events: readonly RecordedEvent[]): bigint[] => [...new Set(events.map((e) => e.position.commit))];

// ---------------------------------------------------------------- concurrent writers

describe('concurrent writers on one key (FAILURE-MODES #15: over-admission during a brief race; #9: bulk enqueue skipped the limit)', () => {
  /** 20 enqueuers, 5 on each of 4 writers (each its own pool and store), all at once, on a limit-3 key. */
  const race = async (key: string) => {
    const writers = [1, 2, 3, 4].map((i) => openWriter(`${key}-${i}`));
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => writers[i % 4]!.enqueue([{ name: 'work', key, limit: 3, jobId: `${key}-${i}` }])));
    await Promise.all(writers.map((w) => w.close()));
    const statuses = results.map((r) => r[0]!.status);
    expect(statuses.filter((s) => s === 'acquired')).toHaveLength(3);
    expect(statuses.filter((s) => s === 'parked')).toHaveLength(17);
    const { state, events } = await foldChecked(keyStream(key));
    expect(holders(state)).toHaveLength(3);
    expect(jobsIn(state, 'parked')).toHaveLength(17);
    const enqueued = events.filter((e) => e.type === 'JobEnqueued').map((e) => e.data.jobId);
    expect(enqueued).toHaveLength(20);
    expect(new Set(enqueued).size).toBe(20);
    expect(events.filter((e) => e.type === 'SlotAcquired')).toHaveLength(3);
    expect(events.filter((e) => e.type === 'JobParked')).toHaveLength(17);
    expect(events.filter((e) => e.type === 'KeyLimitSet')).toHaveLength(1);
    expect(events).toHaveLength(41);
    // It was a race: more than one writer wrote the stream.
    expect(writers.filter((w) => w.tx.committed > 0).length).toBeGreaterThan(1);
  };

  it('20 concurrent enqueuers through 4 writers, each with its own pool and store, on a limit-3 key that exists: 3 holders, 17 parked, every event once', async () => {
    right(await openWriter('race-setup').writer.execute(keyStream('race'), { type: 'SetLimit', limit: 3, by: 'ops' }));
    await race('race');
  });

  it('the same on a new key, whose creation the 4 writers race for too: the losers decide again on the winner\'s events', async () => {
    await race('race-new');
  });

  it('a bulk enqueue of one key is admitted against the limit job by job, like single enqueues (#9)', async () => {
    const w = openWriter('bulk');
    const results = await w.enqueue(Array.from({ length: 6 }, (_, i) => ({ name: 'work', key: 'bulk', limit: 2, jobId: `bulk-${i}` })));
    expect(results.map((r) => r.status)).toEqual(['acquired', 'acquired', 'parked', 'parked', 'parked', 'parked']);
    const { state } = await foldChecked(keyStream('bulk'));
    expect(holders(state).map((j) => j.jobId).sort()).toEqual(['bulk-0', 'bulk-1']);
  });
});

// ---------------------------------------------------------------- processes

const DIST_INDEX = new URL('../../dist/src/index.js', import.meta.url).pathname;
const DIST_WRITER = new URL('../../dist/src/commands/key-writer.js', import.meta.url).pathname;
const SRC_WRITER = new URL('../../src/commands/key-writer.ts', import.meta.url).pathname;
const PROCESS = new URL('../fixtures/key-writer-process.mjs', import.meta.url).pathname;

interface ProcessStats {
  enqueued: string[];
  started: number;
  refusedStarts: Record<string, number>;
  completed: string[];
  yielded: number;
  doubleCompletes: number;
  problems: string[];
}

describe('writers in separate OS processes (FAILURE-MODES #15, #1, #6)', () => {
  it('3 processes, 3 loops each, enqueuing, starting, yielding and completing on 2 shared limit-2 keys: the limit holds and each lease is released once', async () => {
    // The fixture runs the built library: npm test builds dist/ before vitest.
    expect(existsSync(DIST_INDEX), `${DIST_INDEX} is missing: run npm run build`).toBe(true);
    expect(statSync(DIST_WRITER).mtimeMs, 'dist/ is older than src/commands/key-writer.ts: run npm run build').toBeGreaterThanOrEqual(statSync(SRC_WRITER).mtimeMs);

    const keys = ['proc-a', 'proc-b'];
    const perProcess = 8;
    const mineOf = (p: number) => Array.from({ length: perProcess }, (_, i) => ({ jobId: `proc-${p}-${i}`, key: keys[(p + i) % keys.length]! }));
    const jobs = [0, 1, 2].flatMap(mineOf);
    const all = jobs.map((j) => j.jobId);
    // The database's projection mode is recorded and the keys exist before the processes race: the
    // race to record the mode and the race to create a stream have tests of their own.
    await projectionMode(db.pool, 'inline');
    const setup = openWriter('proc-setup');
    for (const key of keys) right(await setup.writer.execute(keyStream(key), { type: 'SetLimit', limit: 2, by: 'ops' }));
    const stats = await runProcesses<ProcessStats>(
      PROCESS,
      [0, 1, 2].map((index) => ({ databaseUrl: db.url, index, keys, limit: 2, mine: mineOf(index), all, loops: 3, seed: 1_000 + index })),
    );

    expect(stats.flatMap((s) => s.problems)).toEqual([]);
    const completed = stats.flatMap((s) => s.completed);
    expect(completed.sort()).toEqual([...all].sort());
    for (const key of keys) {
      const { state, events } = await foldChecked(keyStream(key));
      expect(Object.keys(state.jobs), `${key}: jobs left`).toEqual([]);
      const mine = jobs.filter((j) => j.key === key).map((j) => j.jobId);
      expect(events.filter((e) => e.type === 'JobCompleted').map((e) => e.data.jobId).sort()).toEqual(mine.sort());
      expect(events.filter((e) => e.type === 'JobEnqueued')).toHaveLength(mine.length);
      // Every start the processes saw accepted is one JobStarted, and every yield one JobYielded.
      expect(events.filter((e) => e.type === 'JobStarted').length + events.filter((e) => e.type === 'JobYielded').length).toBeGreaterThan(0);
    }
    const allEvents = (await Promise.all(keys.map((k) => eventsOf(keyStream(k))))).flat();
    expect(allEvents.filter((e) => e.type === 'JobStarted')).toHaveLength(stats.reduce((n, s) => n + s.started, 0));
    expect(allEvents.filter((e) => e.type === 'JobYielded')).toHaveLength(stats.reduce((n, s) => n + s.yielded, 0));
    // The processes did race: some starts lost to another loop or process and were fenced.
    expect(stats.reduce((n, s) => n + Object.values(s.refusedStarts).reduce((a, b) => a + b, 0), 0)).toBeGreaterThan(0);
  }, 60_000);
});

describe('found while running writers in processes', () => {
  it('projectionMode: a ledger opening a fresh database while another one records the mode gets the recorded mode, not a missing row', async () => {
    const own = await createMigratedDatabase(3);
    const first = await own.pool.connect();
    try {
      // The first opener has recorded the mode, not yet committed (as in a process that opened a moment earlier).
      await first.query('BEGIN');
      expect(await projectionMode(first, undefined)).toBe('inline');
      const second = projectionMode(own.pool, undefined).catch((e: unknown) => e);
      await until(
        async () => (await own.pool.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, [(await first.query('SELECT pg_backend_pid() AS pid')).rows[0].pid])).rows[0].n,
        (n) => Number(n) > 0,
        'the second opener to wait for the first',
        10_000,
      );
      await first.query('COMMIT');
      expect(await second).toBe('inline');
    } finally {
      first.release();
      await own.drop();
    }
  });
});

// ---------------------------------------------------------------- a busy key

describe('a key held by another transaction', () => {
  it('a 200-key enqueueMany waits for a held key without failing as a whole, other writers commit meanwhile, and every job lands exactly once', async () => {
    const name = (i: number) => `busy-${String(i).padStart(3, '0')}`;
    const keys = Array.from({ length: 200 }, (_, i) => name(i));
    const [early, held, later] = [name(50), name(100), name(150)];
    const setup = openWriter('busy-setup');
    await setup.enqueue([early, held, later].map((key) => ({ name: 'work', key, limit: 1, jobId: `${key}-first` })));

    const h = await holdStreams(keyStream(held));
    const w = openWriter('busy');
    try {
      // Submitted in one tick (no given job ids: nothing to look up first), so one flush.
      const batch = w.enqueue(keys.map((key) => ({ name: 'work', key, limit: 1 })));
      const beside = w.writer.execute(keyStream('busy-beside'), enqueueCmd('busy-beside-1'));
      await h.waiters(1);

      // Writers of other processes go on: keys outside the batch, and a key of the batch the
      // waiting flush has not reached yet (it locks in name order).
      const others = [openWriter('busy-other-1'), openWriter('busy-other-2')];
      await within(
        Promise.all([
          others[0]!.enqueue([{ name: 'work', key: 'busy-x', limit: 2 }, { name: 'work', key: 'busy-y', limit: 2 }]),
          others[1]!.writer.execute(keyStream(later), enqueueCmd(`${later}-other`)).then(right),
        ]),
        10_000,
        'other writers while the key is held',
      );
      // Nor does this writer's own next submission on another key: it goes into a flush of its own.
      right(await within(w.writer.execute(keyStream('busy-meanwhile'), enqueueCmd('busy-meanwhile-1')), 10_000, "the writer's own submission on another key"));
      expect(await pending(batch)).toBe(true);
      expect(await pending(beside)).toBe(true);

      await h.release();
      const [enqueued, besideResult] = await within(Promise.all([batch, beside]), 15_000, 'the batch after the release');
      right(besideResult);
      expect(enqueued).toHaveLength(200);
      expect(enqueued.map((r) => r.status)).toEqual(keys.map((k) => ([early, held, later].includes(k) ? 'parked' : 'acquired')));

      const streams = await Promise.all(keys.map((k) => foldChecked(keyStream(k))));
      const jobIds = streams.flatMap(({ events }) => events.filter((e) => e.type === 'JobEnqueued').map((e) => String(e.data.jobId)));
      for (const r of enqueued) expect(jobIds.filter((id) => id === r.jobId), r.jobId).toHaveLength(1);
      // The batch is one transaction (all or nothing), after the other writer's event on `later`,
      // whose last writer was younger than the waiting flush: the batch went to the next flush.
      const batchEvents = streams.flatMap(({ events }) => events.filter((e) => enqueued.some((r) => r.jobId === e.data.jobId)));
      expect(transactionsOf(batchEvents)).toHaveLength(1);
      const laterOther = (await eventsOf(keyStream(later))).find((e) => e.data.jobId === `${later}-other`)!;
      expect(batchEvents[0]!.position.commit).toBeGreaterThan(laterOther.position.commit);
      // `beside` was in the flush the batch was deferred from: it did not wait for the batch.
      const [besideEvent] = await eventsOf(keyStream('busy-beside'));
      expect(besideEvent!.position.commit).toBeLessThan(batchEvents[0]!.position.commit);
    } finally {
      await h.release();
    }
  });

  it('deferral (streams.transaction_id): a flush older than a stream\'s last writer does not append to it, and writes it next flush, in submission order', async () => {
    const [a, b, c] = ['key:defer-a', 'key:defer-b', 'key:defer-c'];
    const setup = openWriter('defer-setup');
    for (const s of [a, b, c]) right(await setup.writer.execute(s, enqueueCmd(`${s}-0`)));

    const h = await holdStreams(b);
    const w = openWriter('defer');
    const young = openWriter('defer-young');
    try {
      // One flush on a, b, c: it locks a (and so has its transaction id), then waits for b.
      const onA = w.writer.execute(a, enqueueCmd('defer-a-1'));
      const onB = w.writer.execute(b, enqueueCmd('defer-b-1'));
      const onC1 = w.writer.execute(c, enqueueCmd('defer-c-1'));
      await h.waiters(1);
      const onC2 = w.writer.execute(c, enqueueCmd('defer-c-2'));
      // A younger transaction writes c and commits while the old one waits.
      await within(young.writer.execute(c, enqueueCmd('defer-c-young')).then(right), 10_000, 'the younger writer on c (it must not wait for the old flush)');
      await h.release();
      for (const r of await Promise.all([onA, onB, onC1, onC2])) right(r);

      const [ea, eb, ec] = await Promise.all([a, b, c].map(foldChecked));
      const byJob = (events: readonly RecordedEvent[], jobId: string) => events.find((e) => e.type === 'JobEnqueued' && e.data.jobId === jobId)!;
      const old = byJob(ea!.events, 'defer-a-1').position.commit;
      expect(byJob(eb!.events, 'defer-b-1').position.commit).toBe(old);
      const youngTx = byJob(ec!.events, 'defer-c-young').position.commit;
      expect(youngTx, 'the construction: the other writer on c is younger than the waiting flush').toBeGreaterThan(old);
      // Nothing of c in the old transaction; c's submissions in a later one, after the young writer's, in order.
      expect(ec!.events.filter((e) => e.position.commit === old)).toEqual([]);
      const c1 = byJob(ec!.events, 'defer-c-1');
      const c2 = byJob(ec!.events, 'defer-c-2');
      expect(c1.position.commit).toBeGreaterThan(youngTx);
      expect(c1.revision).toBeLessThan(c2.revision);
      expect(ec!.state.jobs['defer-c-1']!.seq).toBeLessThan(ec!.state.jobs['defer-c-2']!.seq);
      // The lock said so: c came back deferred.
      expect(w.tx.locks.flat().some((l) => l.stream === c && l.deferred)).toBe(true);
    } finally {
      await h.release();
    }
  });

  it('a stream another writer creates while the flush waits: the write fails on streams_pkey, the flush runs again and decides on the other\'s events (#15)', async () => {
    const [held, fresh] = ['key:created-held', 'key:created-new'];
    const setup = openWriter('created-setup');
    right(await setup.writer.execute(held, enqueueCmd('created-held-0')));
    const h = await holdStreams(held);
    const w = openWriter('created');
    const other = openWriter('created-other');
    try {
      const onHeld = w.writer.execute(held, enqueueCmd('created-held-1'));
      const onFresh = w.writer.execute(fresh, enqueueCmd('created-new-w'));
      await h.waiters(1);
      right(await within(other.writer.execute(fresh, enqueueCmd('created-new-other')), 10_000, 'the other writer creating the stream'));
      await h.release();
      right(await onHeld);
      const decided = right(await onFresh);
      // Decided on the other's events: its job holds the only slot, ours parks.
      expect(decided.events.map((e) => e.type)).toEqual(['JobEnqueued', 'JobParked']);
      const { state } = await foldChecked(fresh);
      expect(holders(state).map((j) => j.jobId)).toEqual(['created-new-other']);
      expect(w.tx.failures.some((e) => e instanceof TransientWriteError)).toBe(true);
    } finally {
      await h.release();
    }
  });

  it('a writer that once saw a stream empty, and then finds it created by another writer, writes on the current state instead of retrying the create until it gives up', async () => {
    const stream = 'key:seen-empty';
    const w = openWriter('seen-empty', { maxAttempts: 10 });
    const other = openWriter('seen-empty-other');
    // A command that decides nothing on the empty stream: the writer now remembers it as empty.
    expect(right(await w.writer.execute(stream, { type: 'DiscardParked', by: 'ops' })).events).toEqual([]);
    right(await other.writer.execute(stream, enqueueCmd('seen-empty-other')));
    const result = await w.writer.execute(stream, enqueueCmd('seen-empty-w')).catch((e: unknown) => e);
    expect(result, 'the enqueue after another writer created the stream').not.toBeInstanceOf(ConflictRetriesExhaustedError);
    expect(right(result as CommandResult).events.map((e) => e.type)).toEqual(['JobEnqueued', 'JobParked']);
    await foldChecked(stream);
  });
});

// ---------------------------------------------------------------- lost connections

interface Proxy {
  readonly url: string;
  /** Cuts every connection now (a network cut). */
  cutAll(): void;
  /** Lets the next COMMIT reach the server and commit there, and cuts that connection before its answer comes back. */
  loseNextCommitAnswer(): Promise<void>;
  close(): Promise<void>;
}

/** A TCP proxy in front of the test server, to cut a writer's connections where the test wants. */
const startProxy = async (): Promise<Proxy> => {
  const target = new URL(db.url);
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket; commitSent: boolean }>();
  let armed: (() => void) | undefined;
  const COMMIT = Buffer.from('COMMIT\0');
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    const pair = { client, upstream, commitSent: false };
    pairs.add(pair);
    const cut = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on('data', (chunk) => {
      if (armed && chunk.includes(COMMIT)) pair.commitSent = true;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      // The server's CommandComplete "COMMIT": the transaction is committed; its answer never arrives.
      if (pair.commitSent && chunk.includes(COMMIT)) {
        const done = armed!;
        armed = undefined;
        cut();
        done();
        return;
      }
      client.write(chunk);
    });
    client.on('error', cut);
    upstream.on('error', cut);
    client.on('close', cut);
    upstream.on('close', cut);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = new URL(db.url);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    cutAll: () => {
      for (const p of [...pairs]) {
        p.client.destroy();
        p.upstream.destroy();
      }
    },
    loseNextCommitAnswer: () => new Promise<void>((r) => (armed = r)),
    close: async () => {
      for (const p of [...pairs]) {
        p.client.destroy();
        p.upstream.destroy();
      }
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
};

describe('a lost connection reruns the flush (FAILURE-MODES #19, partly)', () => {
  it('the network cut while the flush waits for a lock: the flush runs again on a new connection and lands once', async () => {
    const stream = 'key:cut';
    const setup = openWriter('cut-setup');
    right(await setup.writer.execute(stream, enqueueCmd('cut-0')));
    const proxy = await startProxy();
    const h = await holdStreams(stream);
    try {
      const w = openWriter('cut', { url: proxy.url, tolerateClientErrors: true });
      const enqueued = w.writer.execute(stream, enqueueCmd('cut-1'));
      await h.waiters(1);
      proxy.cutAll();
      await until(async () => w.tx.failures.length, (n) => n > 0, 'the cut seen by the writer', 10_000);
      await h.release();
      expect(right(await within(enqueued, 15_000, 'the enqueue after the cut')).events.map((e) => e.type)).toEqual(['JobEnqueued', 'JobParked']);
      expect(w.tx.failures[0]).toBeInstanceOf(TransientWriteError);
      const { events } = await foldChecked(stream);
      expect(events.filter((e) => e.data.jobId === 'cut-1' && e.type === 'JobEnqueued')).toHaveLength(1);
    } finally {
      await h.release();
      await proxy.close();
    }
  });

  it('the server terminates the backend (as a restart does) while the flush waits: the flush runs again and lands once', async () => {
    const stream = 'key:terminated';
    const setup = openWriter('terminated-setup');
    right(await setup.writer.execute(stream, enqueueCmd('terminated-0')));
    const h = await holdStreams(stream);
    try {
      const w = openWriter('terminated', { tolerateClientErrors: true });
      const enqueued = w.writer.execute(stream, enqueueCmd('terminated-1')).catch((e: unknown) => e);
      const [pid] = await h.waiters(1);
      await db.pool.query('SELECT pg_terminate_backend($1)', [pid]);
      await h.release();
      const result = await within(enqueued, 15_000, 'the enqueue after the backend was terminated');
      expect(result, `the submission failed: ${String(result)}`).not.toBeInstanceOf(Error);
      expect(right(result as CommandResult).events.map((e) => e.type)).toEqual(['JobEnqueued', 'JobParked']);
      const { events } = await foldChecked(stream);
      expect(events.filter((e) => e.data.jobId === 'terminated-1' && e.type === 'JobEnqueued')).toHaveLength(1);
    } finally {
      await h.release();
    }
  });

  it('a connection lost while a flush holds it is an error of that flush, not an uncaught \'error\' event (which would crash the process)', async () => {
    // pg emits 'error' on a client whose connection ends; the pool listens only while the client
    // is idle, so whoever checks one out must listen while it holds it, or the emit throws.
    const stream = 'key:listening';
    const setup = openWriter('listening-setup');
    right(await setup.writer.execute(stream, enqueueCmd('listening-0')));
    const h = await holdStreams(stream);
    try {
      const w = openWriter('listening');
      const acquired: pg.PoolClient[] = [];
      w.pool.on('acquire', (client) => acquired.push(client));
      const enqueued = w.writer.execute(stream, enqueueCmd('listening-1'));
      await h.waiters(1);
      expect(acquired).toHaveLength(1);
      expect(acquired[0]!.listenerCount('error'), 'error listeners on the client the flush has checked out').toBeGreaterThan(0);
      await h.release();
      right(await enqueued);
    } finally {
      await h.release();
    }
  });

  it('#19: a Complete whose COMMIT answer was lost is reported as the completion that was written, not re-decided into a StaleLease refusal', async () => {
    const stream = 'key:lost-commit';
    const proxy = await startProxy();
    try {
      const w = openWriter('lost-commit', { url: proxy.url, tolerateClientErrors: true });
      const lease = leaseIn(right(await w.writer.execute(stream, enqueueCmd('lost-commit-1'))).events, 'lost-commit-1');
      right(await w.writer.execute(stream, { type: 'Start', jobId: 'lost-commit-1', leaseId: lease, workerId: 'w1' }));
      const lost = proxy.loseNextCommitAnswer();
      const completed = w.writer.execute(stream, { type: 'Complete', jobId: 'lost-commit-1', leaseId: lease });
      await within(lost, 10_000, 'the COMMIT whose answer is lost');
      const result = await within(completed, 15_000, 'the Complete after its COMMIT answer was lost');
      // What was written: exactly one completion.
      const { events } = await foldChecked(stream);
      expect(events.filter((e) => e.type === 'JobCompleted')).toHaveLength(1);
      // What the caller hears must be that completion, not a refusal of its own write.
      expect(E.isLeft(result) ? result.left : undefined, 'the caller was told its own completion was refused').toBeUndefined();
    } finally {
      await proxy.close();
    }
  });

  it('#19: the job a Complete handed off is still handed to its worker when the COMMIT answer was lost (not left idle until its lease expires)', async () => {
    const stream = 'key:lost-handoff';
    const proxy = await startProxy();
    try {
      const w = openWriter('lost-handoff', { url: proxy.url, tolerateClientErrors: true });
      const lease = leaseIn(right(await w.writer.execute(stream, enqueueCmd('lost-handoff-1'))).events, 'lost-handoff-1');
      right(await w.writer.execute(stream, enqueueCmd('lost-handoff-2')));
      right(await w.writer.execute(stream, { type: 'Start', jobId: 'lost-handoff-1', leaseId: lease, workerId: 'w1' }));
      const lost = proxy.loseNextCommitAnswer();
      const completed = w.writer.execute(stream, { type: 'Complete', jobId: 'lost-handoff-1', leaseId: lease, handOffTo: { workerId: 'w1', queue: 'default' } });
      await within(lost, 10_000, 'the COMMIT whose answer is lost');
      const result = right(await within(completed, 15_000, 'the Complete after its COMMIT answer was lost'));
      expect(result.events.map((e) => e.type)).toContain('JobStarted');
      expect(result.handedOff?.map((j) => j.jobId)).toEqual(['lost-handoff-2']);
      const { events } = await foldChecked(stream);
      expect(events.filter((e) => e.type === 'JobStarted' && e.data.jobId === 'lost-handoff-2')).toHaveLength(1);
    } finally {
      await proxy.close();
    }
  });
});

// ---------------------------------------------------------------- stale caches

describe('stale cached states (FAILURE-MODES #1, #6: a release decided on a stale state would miss the parked jobs)', () => {
  it('regression: a writer that wrote a key last decides nothing (ExpireLeases) only on the stream as it is, not on its cache: another process started the job since, and its lease is expired', async () => {
    // Found by the workers e2e kill -9 test: the sweeper's writer had enqueued the job (so it
    // skipped the lock), decided "no started lease to expire" on its cache, wrote nothing, and
    // nothing checked it. A decision that writes nothing is only an answer on a read stream.
    const stream = keyStream('stale-sweep');
    const sweeper = openWriter('stale-sweep-a');
    const worker = openWriter('stale-sweep-b');
    const lease = leaseIn(right(await sweeper.writer.execute(stream, enqueueCmd('stale-sweep-1'))).events, 'stale-sweep-1');
    right(await worker.writer.execute(stream, { type: 'Start', jobId: 'stale-sweep-1', leaseId: lease, workerId: 'w' }));
    const at = clock.now;
    clock.now = at + 10 * 60_000;
    try {
      const events = right(await sweeper.writer.execute(stream, { type: 'ExpireLeases', jitter: 0 })).events;
      expect(events.map((e) => e.type)).toEqual(['LeaseExpired', 'SlotReleased', 'JobScheduled']);
      // A refusal is no answer on a stale cache either: the worker's lease is gone now.
      const renewed = await sweeper.writer.execute(stream, { type: 'Renew', jobId: 'stale-sweep-1', leaseId: lease });
      expect(E.isLeft(renewed) && renewed.left.tag).toBe('StaleLease');
    } finally {
      clock.now = at;
    }
  });

  it('two writers alternating on one key: every command is decided on the current state, the optimistic path falls back without failing the caller, and rollbacks stay few', async () => {
    // A database of its own, so pg_stat_database counts only these writers' transactions.
    const own = await createMigratedDatabase(2);
    const ownReader = new PostgresEventStore(own.pool);
    try {
      const a = openWriter('alt-a', { url: own.url });
      const b = openWriter('alt-b', { url: own.url });
      const stream = keyStream('alt');
      const steps: { by: Harness; command: Command }[] = [];
      const run = async (by: Harness, command: Command): Promise<readonly KeyEvent[]> => {
        const before = await ownReader.readStream(stream);
        const expected = decide(command, stateOf(before), clock.now);
        const events = right(await by.writer.execute(stream, command)).events;
        // Decided on the current state: what the pure decider makes of the whole stream so far.
        expect(events, `${by.name} ${command.type}`).toEqual(E.isRight(expected) ? expected.right : undefined);
        const after = await ownReader.readStream(stream);
        expect(after.slice(before.length).map(decodeRecorded)).toEqual(events);
        steps.push({ by, command });
        return events;
      };
      const writers = [a, b];
      const priorities = [0, 0, 5, 1, 1, 0];
      const leases = new Map<string, string>();
      for (const [i, priority] of priorities.entries()) {
        const events = await run(writers[i % 2]!, enqueueCmd(`alt-${i}`, 2, { priority }));
        if (events.some((e) => e.type === 'SlotAcquired')) leases.set(`alt-${i}`, leaseIn(events, `alt-${i}`));
      }
      // Each holder is started by one writer and completed by the other; each completion promotes the next.
      const promoted: string[] = [];
      let turn = 0;
      while (leases.size > 0) {
        const [jobId, leaseId] = [...leases][0]!;
        leases.delete(jobId);
        await run(writers[turn++ % 2]!, { type: 'Start', jobId, leaseId, workerId: 'w' });
        const events = await run(writers[turn++ % 2]!, { type: 'Complete', jobId, leaseId });
        for (const e of events) {
          if (e.type === 'JobPromoted') {
            promoted.push(e.data.jobId);
            leases.set(e.data.jobId, e.data.leaseId);
          }
        }
      }
      // Promotions by priority, then enqueue order.
      expect(promoted).toEqual(['alt-5', 'alt-3', 'alt-4', 'alt-2']);
      const events = await ownReader.readStream(stream);
      expect(stateOf(events).jobs).toEqual({});

      // The optimistic path was taken and refused (StaleStateError), and fell back; after that a
      // writer that finds the other's events locks first, so the refusals do not grow with the steps.
      const stale = [a, b].flatMap((w) => w.tx.failures).filter((e) => e instanceof StaleStateError);
      expect(stale.length).toBeGreaterThan(0);
      expect(a.tx.rolledBack + b.tx.rolledBack).toBeLessThanOrEqual(2);
      expect(steps.length).toBeGreaterThan(15);

      // The database agrees, once the writers' backends have gone (their statistics are flushed when they exit).
      await a.close();
      await b.close();
      const dbName = new URL(own.url).pathname.slice(1);
      await until(
        async () => Number((await own.pool.query(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name IN ('alt-a', 'alt-b')`)).rows[0].n),
        (n) => n === 0,
        'the writers\' backends to exit',
        10_000,
      );
      const { rows } = await own.pool.query<{ rollbacks: string }>('SELECT xact_rollback AS rollbacks FROM pg_stat_database WHERE datname = $1', [dbName]);
      expect(Number(rows[0]!.rollbacks)).toBe(a.tx.rolledBack + b.tx.rolledBack);
    } finally {
      await own.drop();
    }
  });
});

// ---------------------------------------------------------------- isolation

describe('a failure is pinned on the submission that caused it', () => {
  it('a submission the database refuses (NUL in its metadata: jsonb cannot hold it) fails alone; the rest of its flush commits', async () => {
    // The command's fields are checked before anything is written (NUL in args is a ValidationError);
    // metadata is the caller's own, so the database is what refuses it.
    const w = openWriter('nul');
    const results = await Promise.allSettled([
      w.writer.execute(keyStream('iso-a'), enqueueCmd('iso-a-1')),
      w.writer.execute(keyStream('iso-nul'), enqueueCmd('iso-nul-1'), { note: 'a\u0000b' }),
      w.writer.executeMany([
        { stream: keyStream('iso-b'), command: enqueueCmd('iso-b-1') },
        { stream: keyStream('iso-c'), command: enqueueCmd('iso-c-1') },
      ]),
    ]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[1] as PromiseRejectedResult).reason).toMatchObject({ code: '22P05' });
    expect(await eventsOf(keyStream('iso-nul'))).toEqual([]);
    for (const key of ['iso-a', 'iso-b', 'iso-c']) expect((await foldChecked(keyStream(key))).events).toHaveLength(3);
    // Nothing is stuck: the same stream takes a clean submission next.
    right(await w.writer.execute(keyStream('iso-nul'), enqueueCmd('iso-nul-2')));
    expect(await eventsOf(keyStream('iso-nul'))).toHaveLength(3);
  });

  it('a stream with an event that does not decode fails its own submissions only, naming the stream and revision', async () => {
    const [bad, good] = [keyStream('undecodable'), keyStream('undecodable-beside')];
    const w = openWriter('undecodable');
    right(await w.writer.execute(bad, enqueueCmd('undecodable-1')));
    right(await w.writer.execute(good, enqueueCmd('undecodable-beside-1')));
    // An event no decoder takes, written by SQL behind the writer's back (its cache still says revision 2).
    await db.pool.query(
      `WITH e AS (INSERT INTO appends (stream, revision, types, ids, data) VALUES ($1, 3, ARRAY['SlotAcquired'], ARRAY[gen_random_uuid()], '[{"jobId": "x", "leaseId": 42, "at": 1}]'))
       UPDATE streams SET revision = 3, transaction_id = pg_current_xact_id() WHERE stream = $1`,
      [bad],
    );
    const fresh = openWriter('undecodable-fresh');
    for (const writer of [w, fresh]) {
      const before = await eventCount();
      const results = await Promise.allSettled([
        writer.writer.execute(bad, enqueueCmd(`undecodable-${writer.name}`)),
        writer.writer.executeMany([
          { stream: good, command: enqueueCmd(`undecodable-both-${writer.name}`) },
          { stream: bad, command: enqueueCmd(`undecodable-both-bad-${writer.name}`) },
        ]),
        writer.writer.execute(good, enqueueCmd(`undecodable-good-${writer.name}`)),
      ]);
      expect(results.map((r) => r.status), writer.name).toEqual(['rejected', 'rejected', 'fulfilled']);
      for (const r of results.slice(0, 2)) {
        const error = (r as PromiseRejectedResult).reason;
        expect(error).toBeInstanceOf(EventDecodeError);
        expect(error).toMatchObject({ stream: bad, revision: 3 });
      }
      expect(await eventCount()).toBe(before + 2);
    }
    // load() says the same: the event is never skipped.
    await expect(fresh.writer.load(bad)).rejects.toMatchObject({ name: 'EventDecodeError', stream: bad, revision: 3 });
  });

  it('a DuplicateEventIdError fails only the submission whose JobEnqueued id was already recorded', async () => {
    const first = openWriter('dup-first');
    const second = openWriter('dup-second');
    right(await first.writer.execute(keyStream('dup-x'), enqueueCmd('dup-job')));
    const results = await Promise.allSettled([
      second.writer.execute(keyStream('dup-y'), enqueueCmd('dup-job')),
      second.writer.execute(keyStream('dup-z'), enqueueCmd('dup-other')),
    ]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'fulfilled']);
    const error = (results[0] as PromiseRejectedResult).reason as DuplicateEventIdError;
    expect(error).toBeInstanceOf(DuplicateEventIdError);
    expect(error.eventId).toBe(enqueuedEventId('dup-job'));
    expect(await eventsOf(keyStream('dup-y'))).toEqual([]);
    expect(await eventsOf(keyStream('dup-z'))).toHaveLength(3);
  });

  it('the same given jobId enqueued from two writers at once on two keys is recorded once', async () => {
    const writers = [openWriter('same-id-1'), openWriter('same-id-2')];
    for (let round = 0; round < 5; round++) {
      const jobId = `same-id-${round}`;
      const results = await Promise.all(writers.map((w, i) => w.enqueue([{ name: 'work', key: `same-id-k${i}`, limit: 1, jobId }])));
      expect(results.map((r) => r[0]!.status).filter((s) => s !== 'duplicate'), jobId).toHaveLength(1);
      expect(await count(`SELECT count(*) AS n FROM events WHERE type = 'JobEnqueued' AND data->>'jobId' = $1`, [jobId])).toBe(1);
    }
    for (const i of [0, 1]) await foldChecked(keyStream(`same-id-k${i}`));
  });

  it('a given jobId enqueued again after the job finished records nothing (the decider has forgotten it; the store has not)', async () => {
    const w = openWriter('finished-id');
    const stream = keyStream('finished-id-k');
    const [first] = await w.enqueue([{ name: 'work', key: 'finished-id-k', limit: 1, jobId: 'finished-id-1' }]);
    expect(first!.status).toBe('acquired');
    const lease = leaseIn((await eventsOf(stream)).map(decodeRecorded), 'finished-id-1');
    right(await w.writer.execute(stream, { type: 'Start', jobId: 'finished-id-1', leaseId: lease, workerId: 'w' }));
    right(await w.writer.execute(stream, { type: 'Complete', jobId: 'finished-id-1', leaseId: lease }));
    const before = await eventCount();
    for (const key of ['finished-id-k', 'finished-id-other']) {
      const [again] = await w.enqueue([{ name: 'work', key, limit: 1, jobId: 'finished-id-1' }]);
      expect(again!.status, key).toBe('duplicate');
    }
    expect(await eventCount()).toBe(before);
  });
});

// ---------------------------------------------------------------- snapshots

describe('snapshots', () => {
  /** Enqueue, start and complete `n` jobs one after another (limit 1); then leave `holder` holding. */
  const churn = async (w: Harness, stream: string, n: number, holder: string) => {
    for (let i = 0; i < n; i++) {
      const jobId = `${stream}-${i}`;
      const leaseId = leaseIn(right(await w.writer.execute(stream, enqueueCmd(jobId))).events, jobId);
      right(await w.writer.execute(stream, { type: 'Start', jobId, leaseId, workerId: 'w' }));
      right(await w.writer.execute(stream, { type: 'Complete', jobId, leaseId }));
    }
    right(await w.writer.execute(stream, enqueueCmd(holder)));
  };

  const snapshotsOf = async (stream: string) =>
    (await db.pool.query<{ revision: string; schema_version: number; xmin: string; state: unknown }>('SELECT revision, schema_version, xmin::text AS xmin, state FROM snapshots WHERE stream = $1', [stream])).rows;

  /** What a fresh writer decides for a new enqueue, checked against the pure decider on the whole stream. */
  const freshDecides = async (stream: string, jobId: string) => {
    // It saves no snapshot itself, so what load() reads afterwards is the snapshot under test.
    const fresh = openWriter(`fresh-${jobId}`);
    const all = await eventsOf(stream);
    const command = enqueueCmd(jobId);
    const expected = decide(command, stateOf(all), clock.now);
    const decided = right(await fresh.writer.execute(stream, command));
    expect(decided.events).toEqual(E.isRight(expected) ? expected.right : undefined);
    return { fresh, decided, before: all };
  };

  it('a snapshot is saved in the flush\'s transaction each time the stream passes a multiple of snapshotEvery events', async () => {
    const stream = keyStream('snap');
    const w = openWriter('snap', { snapshotEvery: 10 });
    // Cycle 1 writes 6 events (with KeyLimitSet), each later one 5: the 4th cycle's Complete takes
    // the stream from 19 to 21 events, so the snapshot is at its last revision, 20; the holder's enqueue makes 28.
    await churn(w, stream, 5, 'snap-holder');
    const events = await eventsOf(stream);
    expect(events).toHaveLength(28);
    const [snapshot, ...more] = await snapshotsOf(stream);
    expect(more).toEqual([]);
    expect(Number(snapshot!.revision)).toBe(20);
    expect(snapshot!.schema_version).toBe(KEY_STATE_SCHEMA_VERSION);
    // Stored as JSON text (migration 20).
    expect(JSON.parse(snapshot!.state as string)).toEqual(JSON.parse(JSON.stringify(stateOf(events.slice(0, 21)))));
    // Written by the transaction that appended revision 20 (the row's xmin is its transaction id).
    expect(BigInt(snapshot!.xmin)).toBe(events[20]!.position.commit & 0xffffffffn);
  });

  it('a fresh writer starts from the snapshot and the events after it, and decides what the whole stream says', async () => {
    const stream = keyStream('snap');
    const { fresh } = await freshDecides(stream, 'snap-fresh');
    const [locked] = fresh.tx.locks.flat().filter((l) => l.stream === stream);
    expect(locked!.snapshot?.revision).toBe(20);
    expect(locked!.events.map((e) => e.revision)).toEqual([21, 22, 23, 24, 25, 26, 27]);
    // load() too: the snapshot, then only the events after it.
    const { state, revision } = await fresh.writer.load(stream);
    expect(fresh.reads).toEqual([{ stream, fromRevision: 21 }]);
    expect({ state, revision }).toEqual({ state: stateOf(await eventsOf(stream)), revision: 29 });
  });

  it('a snapshot of another schema version is ignored: the stream is folded', async () => {
    const stream = keyStream('snap-other');
    const w = openWriter('snap-other', { snapshotEvery: 10 });
    await churn(w, stream, 5, 'snap-other-holder');
    await db.pool.query('DELETE FROM snapshots WHERE stream = $1', [stream]);
    // Newer than anything, and were it used, the key would have free slots: the decision would differ.
    const tempting = { ...initialKeyState, limit: 50, leaseMs: 30_000 };
    await new PostgresSnapshotStore(db.pool).save({ stream, revision: 27, schemaVersion: KEY_STATE_SCHEMA_VERSION + 1, state: tempting });
    const { fresh, decided } = await freshDecides(stream, 'snap-other-fresh');
    expect(decided.events.map((e) => e.type)).toEqual(['JobEnqueued', 'JobParked']);
    expect(fresh.tx.locks.flat().find((l) => l.stream === stream)!.snapshot).toBeUndefined();
    const { state, revision } = await fresh.writer.load(stream);
    expect({ state, revision }).toEqual({ state: stateOf(await eventsOf(stream)), revision: 29 });
  });

  it.each([
    ['does not decode', '{"limit": "one"}', 1],
    ['is not JSON (cut short)', '{"limit": 1, "jobs": {', 2],
    ['is JSON but no object', '[1, 2]', 3],
  ])('a snapshot that %s is ignored: the stream is folded', async (_what, text, n) => {
    const what = String(n);
    const stream = keyStream(`snap-corrupt-${what}`);
    const w = openWriter(`snap-corrupt-${what}`, { snapshotEvery: 10 });
    await churn(w, stream, 5, `snap-corrupt-holder-${what}`);
    await db.pool.query(`UPDATE snapshots SET state = $2 WHERE stream = $1`, [stream, text]);
    const { decided } = await freshDecides(stream, `snap-corrupt-fresh-${what}`);
    expect(decided.events.map((e) => e.type)).toEqual(['JobEnqueued', 'JobParked']);
    const loaded = openWriter(`snap-corrupt-load-${what}`);
    const { state, revision } = await loaded.writer.load(stream);
    expect({ state, revision }).toEqual({ state: stateOf(await eventsOf(stream)), revision: 29 });
    await foldChecked(stream);
  });
});

// ---------------------------------------------------------------- group commit

describe('group commit', () => {
  it('submissions made in the same tick land in one transaction, each stream decided in submission order', async () => {
    const w = openWriter('group');
    const submissions = [
      ...Array.from({ length: 20 }, (_, i) => w.writer.execute(keyStream(`group-${i}`), enqueueCmd(`group-${i}-a`))),
      ...Array.from({ length: 10 }, (_, i) => w.writer.execute(keyStream('group-0'), enqueueCmd(`group-0-${i}`))),
    ];
    for (const r of await Promise.all(submissions)) right(r);
    const events = (await Promise.all(Array.from({ length: 20 }, (_, i) => eventsOf(keyStream(`group-${i}`))))).flat();
    expect(transactionsOf(events)).toHaveLength(1);
    expect(w.tx.begun).toBe(1);
    expect(w.tx.committed).toBe(1);
    const { state } = await foldChecked(keyStream('group-0'));
    expect(holders(state).map((j) => j.jobId)).toEqual(['group-0-a']);
    expect(jobsIn(state, 'parked').sort((x, y) => x.seq - y.seq).map((j) => j.jobId)).toEqual(Array.from({ length: 10 }, (_, i) => `group-0-${i}`));
  });

  it('while a flush waits, submissions on other streams go into a flush of their own at once; those naming its streams wait, keep their order, and go together next', async () => {
    const [x, z] = ['key:inflight-x', 'key:inflight-z'];
    const setup = openWriter('inflight-setup');
    for (const stream of [x, z]) right(await setup.writer.execute(stream, enqueueCmd(`${stream}-0`)));
    const h = await holdStreams(x);
    const w = openWriter('inflight');
    try {
      const first = w.writer.execute(x, enqueueCmd('inflight-x-1'));
      await h.waiters(1);
      // Naming x: they wait for the flush that holds it. The x+z one holds z back for the z-only one after it.
      const onX = w.writer.execute(x, enqueueCmd('inflight-x-2'));
      const onXZ = w.writer.executeMany([
        { stream: x, command: enqueueCmd('inflight-x-3') },
        { stream: z, command: enqueueCmd('inflight-z-1') },
      ]);
      const onZ = w.writer.execute(z, enqueueCmd('inflight-z-2'));
      // Other streams: a second flush, committed while the first waits.
      const others = Array.from({ length: 15 }, (_, i) => w.writer.execute(keyStream(`inflight-${i}`), enqueueCmd(`inflight-other-${i}`)));
      for (const r of await within(Promise.all(others), 10_000, 'the submissions on other streams')) right(r);
      const otherEvents = (await Promise.all(Array.from({ length: 15 }, (_, i) => eventsOf(keyStream(`inflight-${i}`))))).flat();
      expect(transactionsOf(otherEvents)).toHaveLength(1);
      for (const p of [first, onX, onXZ, onZ]) expect(await pending(p)).toBe(true);

      await h.release();
      right(await first);
      right(await onX);
      for (const r of await onXZ) right(r);
      right(await onZ);
      const [ex, ez] = await Promise.all([x, z].map(foldChecked));
      const txOf = (events: readonly RecordedEvent[], jobId: string) => events.find((e) => e.type === 'JobEnqueued' && e.data.jobId === jobId)!;
      const next = [txOf(ex!.events, 'inflight-x-2'), txOf(ex!.events, 'inflight-x-3'), txOf(ez!.events, 'inflight-z-1'), txOf(ez!.events, 'inflight-z-2')];
      expect(transactionsOf(next)).toHaveLength(1);
      expect(next[0]!.position.commit).toBeGreaterThan(txOf(ex!.events, 'inflight-x-1').position.commit);
      expect(next[2]!.revision).toBeLessThan(next[3]!.revision);
    } finally {
      await h.release();
    }
  });

  it('no more than maxConcurrentFlushes flushes at once: with that many waiting, the next submission waits for one of them', async () => {
    const [p, q] = ['key:cap-p', 'key:cap-q'];
    const setup = openWriter('cap-setup');
    for (const stream of [p, q]) right(await setup.writer.execute(stream, enqueueCmd(`${stream}-0`)));
    const h = await holdStreams(p, q);
    const w = openWriter('cap', { maxConcurrentFlushes: 2 });
    try {
      const onP = w.writer.execute(p, enqueueCmd('cap-p-1'));
      await new Promise((r) => setImmediate(r));
      const onQ = w.writer.execute(q, enqueueCmd('cap-q-1'));
      await h.waiters(2);
      const onR = w.writer.execute(keyStream('cap-r'), enqueueCmd('cap-r-1'));
      // A third flight would have asked for its transaction by now (begin() is called in the turn it starts).
      for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
      expect(w.tx.asked).toBe(2);
      expect(await pending(onR)).toBe(true);
      await h.release();
      for (const r of await Promise.all([onP, onQ, onR])) right(r);
      expect(w.tx.committed).toBe(3);
    } finally {
      await h.release();
    }
  });

  it('a flush takes at most maxFlushCommands commands, and a larger submission is a flush of its own, never split', async () => {
    const w = openWriter('max-flush', { maxFlushCommands: 4 });
    const single = (i: number) => w.writer.execute(keyStream(`max-flush-${i}`), enqueueCmd(`max-flush-${i}`));
    const big = () => w.writer.executeMany(Array.from({ length: 6 }, (_, i) => ({ stream: keyStream(`max-flush-big-${i}`), command: enqueueCmd(`max-flush-big-${i}`) })));
    // In one tick: 4 singles fill a flush; then the 5th, and the 6th (which does not overlap the
    // 6-command submission it passes); the 6-command one alone.
    await Promise.all([single(0), single(1), single(2), single(3), single(4), big(), single(5)]);
    const txOf = async (stream: string) => (await eventsOf(stream))[0]!.position.commit;
    const singles = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => txOf(keyStream(`max-flush-${i}`))));
    const bigs = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => txOf(keyStream(`max-flush-big-${i}`))));
    const flushes = [new Set(singles.slice(0, 4)), new Set(singles.slice(4)), new Set(bigs)];
    expect(flushes.map((f) => f.size)).toEqual([1, 1, 1]);
    expect(new Set(flushes.map((f) => [...f][0])).size).toBe(3);
    expect(w.tx.committed).toBe(3);
  });
});

// ---------------------------------------------------------------- validation

describe('a command that fails its codec is refused before anything is written', () => {
  const stream = keyStream('invalid');
  const cases: [string, readonly KeyCommand[]][] = [
    ['limit', [{ stream, command: { type: 'Enqueue', limit: 0, job: job('invalid-1') } }]],
    ['jobId', [{ stream, command: { type: 'Start', jobId: '', leaseId: 'l', workerId: 'w' } }]],
    ['job.leaseMs', [{ stream, command: { type: 'Enqueue', job: job('invalid-2', { leaseMs: 10 }) } }]],
    ['type', [{ stream, command: { type: 'Nope' } as unknown as Command }]],
    [
      'commands[1].limit',
      [
        { stream, command: enqueueCmd('invalid-ok') },
        { stream: keyStream('invalid-other'), command: { type: 'SetLimit', limit: 0, by: 'ops' } },
      ],
    ],
  ];

  it.each(cases)('ValidationError naming %s', async (field, items) => {
    const w = openWriter(`invalid-${field}`);
    const before = await eventCount();
    const error = await Promise.resolve()
      .then(() => w.writer.executeMany(items))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe(field);
    await w.writer.drain();
    expect(await eventCount()).toBe(before);
    expect(w.tx.begun).toBe(0);
  });

  it('through enqueueMany: the bad job named by its index, and none of the batch written', async () => {
    const w = openWriter('invalid-enqueue');
    const before = await eventCount();
    const error = await w.enqueue([{ name: 'ok', key: 'invalid-batch' }, { name: 'x', key: 'invalid-batch', limit: -1 }]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).field).toBe('jobs[1].limit');
    expect(await eventCount()).toBe(before);
  });
});

// ---------------------------------------------------------------- readAndStart

describe('readAndStart', () => {
  it('claims and starts in one transaction; a row whose Start is refused (behind the ledger) is passed over; the good ones are returned', async () => {
    const queue = 'ras-q';
    const key = 'ras';
    const w = openWriter('ras');
    const enqueued = await w.enqueue(['ras-0', 'ras-1', 'ras-2'].map((jobId) => ({ name: 'work', key, limit: 2, jobId, queue, args: { jobId } })));
    expect(enqueued.map((e) => e.status)).toEqual(['acquired', 'acquired', 'parked']);
    // A row that says more than the ledger (as an async read model behind it could, or a hand edit): ras-2 claimable under a lease it never had.
    await db.pool.query(`UPDATE jl_jobs SET status = 'holding', lease_id = 'ras-2:99', acquired_at = now() - interval '1 hour' WHERE job_id = 'ras-2'`);
    const begun = w.tx.begun;

    const read = await w.writer.readAndStart({ queue, qty: () => 10, workerId: 'ras-worker' });
    expect(read.read).toBe(3);
    expect(read.started.map((s) => s.message.jobId).sort()).toEqual(['ras-0', 'ras-1']);
    for (const s of read.started) {
      expect(s.stream).toBe(keyStream(key));
      expect(s.message.args).toEqual({ jobId: s.message.jobId });
      expect(s.started).toMatchObject({ jobId: s.message.jobId, leaseId: s.message.leaseId, workerId: 'ras-worker', attempt: 1 });
    }
    expect(w.tx.begun - begun).toBe(1);

    // One transaction: the JobStarted events and the started rows (their xmin); the refused row untouched.
    const events = await eventsOf(keyStream(key));
    const startTx = transactionsOf(events.filter((e) => e.type === 'JobStarted'));
    expect(startTx).toHaveLength(1);
    const xid = startTx[0]! & 0xffffffffn;
    const rows = await db.pool.query<{ job_id: string; status: string; xmin: string }>('SELECT job_id, status, xmin::text FROM jl_jobs WHERE queue = $1 ORDER BY job_id', [queue]);
    expect(rows.rows.map((r) => [r.job_id, r.status])).toEqual([['ras-0', 'running'], ['ras-1', 'running'], ['ras-2', 'holding']]);
    for (const r of rows.rows.slice(0, 2)) expect(BigInt(r.xmin)).toBe(xid);
    expect(BigInt(rows.rows[2]!.xmin)).not.toBe(xid);

    // Nothing left to claim: the started rows run, the refused one is passed over (passOverMs) instead of claimed again by every read.
    expect((await w.writer.readAndStart({ queue, qty: () => 10, workerId: 'ras-worker' })).read).toBe(0);
    await db.pool.query(`UPDATE jl_jobs SET status = 'parked', lease_id = NULL, acquired_at = NULL WHERE job_id = 'ras-2'`);
    await foldChecked(keyStream(key));
  });

  it('a job of a stream another flush of the writer decides on is not claimed (the read passes over busy streams) and is claimed later', async () => {
    const queue = 'ras-busy-q';
    const stream = keyStream('ras-busy');
    const w = openWriter('ras-busy');
    await w.enqueue([{ name: 'work', key: 'ras-busy', limit: 2, jobId: 'ras-busy-1', queue }]);
    const h = await holdStreams(stream);
    try {
      const held = w.writer.execute(stream, enqueueCmd('ras-busy-2', 2, { queue }));
      await h.waiters(1);
      const first = await within(w.writer.readAndStart({ queue, qty: () => 10, workerId: 'ras-busy-w' }), 10_000, 'the read beside the waiting flush');
      expect(first).toEqual({ read: 0, started: [] });
      expect(await count(`SELECT count(*) AS n FROM jl_jobs WHERE queue = $1 AND status = 'holding'`, [queue])).toBe(1);
      await h.release();
      right(await held);
      const again = await w.writer.readAndStart({ queue, qty: () => 10, workerId: 'ras-busy-w' });
      expect(again.started.map((s) => s.message.jobId).sort()).toEqual(['ras-busy-1', 'ras-busy-2']);
      await foldChecked(stream);
    } finally {
      await h.release();
    }
  });

  it('two writers reading one queue at once never start a job twice', async () => {
    const queue = 'ras-race-q';
    const setup = openWriter('ras-race-setup');
    await setup.enqueue(Array.from({ length: 12 }, (_, i) => ({ name: 'work', key: `ras-race-${i % 3}`, limit: 4, queue })));
    const readers = [openWriter('ras-race-1'), openWriter('ras-race-2')];
    const read = (i: number) => readers[i]!.writer.readAndStart({ queue, qty: () => 3, workerId: `ras-race-w${i}` });
    const reads = await Promise.all([0, 1].flatMap((i) => [read(i), read(i), read(i)]));
    // A concurrent read may come back short (rows the other holds are skipped; a job whose stream
    // another flush of the same writer decides on is left for later): what is left is read
    // afterwards, one read at a time, until nothing is left to claim.
    for (let round = 0; round < 20; round++) {
      const more = await read(round % 2);
      reads.push(more);
      if (more.read === 0) break;
    }
    const started = reads.flatMap((r) => r.started.map((s) => s.message.jobId));
    expect(new Set(started).size).toBe(started.length);
    expect(started).toHaveLength(12);
    expect(await count(`SELECT count(*) AS n FROM jl_jobs WHERE queue = $1 AND status = 'holding'`, [queue])).toBe(0);
    for (let i = 0; i < 3; i++) await foldChecked(keyStream(`ras-race-${i}`));
  });
});

// ---------------------------------------------------------------- property

describe('property: random interleavings of 3 writers on 2 keys (FAILURE-MODES #1, #2, #6, #15)', () => {
  type Op =
    | { readonly kind: 'enqueue'; readonly w: number; readonly k: number; readonly priority: number; readonly limit: number }
    | { readonly kind: 'start' | 'complete' | 'completeAgain' | 'yield' | 'fail'; readonly w: number; readonly k: number; readonly pick: number }
    | { readonly kind: 'revoke' | 'expire' | 'admitDue'; readonly w: number; readonly k: number }
    | { readonly kind: 'setLimit'; readonly w: number; readonly k: number; readonly limit: number };

  const w = fc.integer({ min: 0, max: 2 });
  const k = fc.integer({ min: 0, max: 1 });
  const pick = fc.nat(20);
  const op: fc.Arbitrary<Op> = fc.oneof(
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('enqueue' as const), w, k, priority: fc.integer({ min: 0, max: 2 }), limit: fc.integer({ min: 1, max: 3 }) }) },
    { weight: 4, arbitrary: fc.record({ kind: fc.constant('start' as const), w, k, pick }) },
    { weight: 3, arbitrary: fc.record({ kind: fc.constant('complete' as const), w, k, pick }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom('completeAgain' as const, 'yield' as const, 'fail' as const), w, k, pick }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom('revoke' as const, 'expire' as const, 'admitDue' as const), w, k }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('setLimit' as const), w, k, limit: fc.integer({ min: 1, max: 3 }) }) },
  );
  // Rounds of operations run concurrently (each on its writer); rounds one after another.
  const program = fc.array(fc.array(op, { minLength: 1, maxLength: 5 }), { minLength: 2, maxLength: 7 });

  let writers: Harness[] = [];
  beforeAll(() => {
    writers = [0, 1, 2].map((i) => openWriter(`prop-${i}`, { max: 2 }));
  });

  it('the limit holds after every admission, each lease is released at most once, and what the writers report is what was written', async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(program, async (rounds) => {
        run++;
        const streams = [keyStream(`prop-${run}-a`), keyStream(`prop-${run}-b`)];
        // The keys exist before the writers race (the race to create a stream has tests of its own).
        clock.now = T0;
        for (const stream of streams) right(await writers[0]!.writer.execute(stream, { type: 'SetLimit', limit: 2, by: 'ops' }));
        const reported = new Map<string, number>(streams.map((s) => [s, 1]));
        const started: { stream: string; jobId: string; leaseId: string }[] = [];
        const released: { stream: string; jobId: string; leaseId: string }[] = [];
        let n = 0;
        const exec = async (writer: Harness, stream: string, command: Command) => {
          const result = await writer.writer.execute(stream, command);
          if (E.isRight(result)) reported.set(stream, reported.get(stream)! + result.right.events.length);
          return result;
        };
        const holderOf = async (writer: Harness, stream: string, p: number, wanted: (started: boolean) => boolean) => {
          const { state } = await writer.writer.load(stream);
          const hs = holders(state).filter((j) => wanted(j.lease!.workerId !== null));
          return hs.length === 0 ? undefined : hs[p % hs.length]!;
        };
        const step = async (o: Op) => {
          const writer = writers[o.w]!;
          const stream = streams[o.k]!;
          switch (o.kind) {
            case 'enqueue':
              await exec(writer, stream, enqueueCmd(`${stream}-${n++}`, o.limit, { priority: o.priority, maxAttempts: 2 }));
              return;
            case 'start': {
              const h = await holderOf(writer, stream, o.pick, (s) => !s);
              if (h) {
                const r = await exec(writer, stream, { type: 'Start', jobId: h.jobId, leaseId: h.lease!.leaseId, workerId: `w${o.w}` });
                if (E.isRight(r)) started.push({ stream, jobId: h.jobId, leaseId: h.lease!.leaseId });
              }
              return;
            }
            case 'complete':
            case 'fail':
            case 'yield': {
              const mine = started.filter((s) => s.stream === stream && !released.includes(s));
              const s = mine[o.pick % Math.max(1, mine.length)];
              if (!s) return;
              const command: Command =
                o.kind === 'complete'
                  ? { type: 'Complete', jobId: s.jobId, leaseId: s.leaseId }
                  : o.kind === 'fail'
                    ? { type: 'Fail', jobId: s.jobId, leaseId: s.leaseId, error: 'boom', jitter: 0.5 }
                    : { type: 'Yield', jobId: s.jobId, leaseId: s.leaseId };
              if (E.isRight(await exec(writer, stream, command))) released.push(s);
              return;
            }
            case 'completeAgain': {
              const done = released.filter((s) => s.stream === stream);
              const s = done[o.pick % Math.max(1, done.length)];
              if (!s) return;
              // A duplicate delivery of a release already recorded: fenced (#2 as well).
              const r = await exec(writer, stream, { type: 'Complete', jobId: s.jobId, leaseId: s.leaseId });
              expect(E.isLeft(r), `second release of ${s.leaseId} accepted`).toBe(true);
              return;
            }
            case 'revoke':
              await exec(writer, stream, { type: 'RevokeLease', by: 'ops', jitter: 0.5 });
              return;
            case 'expire':
              await exec(writer, stream, { type: 'ExpireLeases', jitter: 0.5 });
              return;
            case 'admitDue':
              await exec(writer, stream, { type: 'AdmitDue' });
              return;
            case 'setLimit':
              await exec(writer, stream, { type: 'SetLimit', limit: o.limit, by: 'ops' });
              return;
          }
        };
        for (const [i, round] of rounds.entries()) {
          // Time moves between rounds: leases run out (30 s) and retries come due.
          clock.now = T0 + i * 20_000;
          await Promise.all(round.map(step));
        }
        for (const stream of streams) {
          const { events } = await foldChecked(stream);
          // No event lost or duplicated: the stream holds exactly the events the writers reported.
          expect(events.length, `${stream}: events written against events reported`).toBe(reported.get(stream));
        }
      }),
      { seed: 20_261_130, numRuns: 25, endOnFailure: true },
    );
    clock.now = T0;
  }, 60_000);
});

import { describe, expect, it } from 'vitest';
import { mk, type EventOf, type KeyEvent, type KeyEventType } from '../../src/domain/events.js';
import type { RecordedEvent } from '../../src/domain/ports/event-store.js';
import { HANDED_OFF_SQL, LEASE_LOST_CHANNEL, LEASE_LOST_SQL, QUEUE_CHANNEL, WAKE_SQL, createDispatcher, projectDispatch } from '../../src/projections/dispatcher.js';
import { INSERT_JOBS_SQL, UPDATE_JOBS_SQL } from '../../src/projections/job-rows.js';
import { isLedgerStream, keyOfStream, statement, type ProjectedEvent, type Projection, type Statement } from '../../src/projections/projection.js';
import {
  DELETE_LIMIT_JOBS_SQL,
  PAUSE_KEYS_SQL,
  READ_MODEL_TABLES,
  UPSERT_KEYS_SQL,
  UPSERT_LIMIT_JOBS_SQL,
  createReadModelProjections,
  projectReadModels,
} from '../../src/projections/read-models.js';
import { NotRebuildableError, rebuildSpec } from '../../src/projections/rebuild.js';
import { projectAll, toProjected } from '../../src/projections/apply.js';

// The batch mappings, without a database: what each projection asks for a batch of events. The
// rows these statements write are held to the fold by inline/rebuild/batching.int.test.ts.

const at = Date.UTC(2030, 0, 1);
const S = 1_000;

/** One event of every type, as the decider emits them for job j1 (lease j1:1) on key k; the Limit* ones for j1 of key h as a guest of k (its limit key). */
const samples: { [T in KeyEventType]: EventOf<T> } = {
  KeyLimitSet: mk('KeyLimitSet', { limit: 2, leaseMs: 30_000, by: null, at }),
  JobEnqueued: mk('JobEnqueued', { jobId: 'j1', name: 'email', args: { to: ['a'] }, queue: 'mail', priority: -1, maxAttempts: 3, leaseMs: 10_000, runAt: null, at }),
  SlotAcquired: mk('SlotAcquired', { jobId: 'j1', leaseId: 'j1:1', expiresAt: null, at }),
  JobParked: mk('JobParked', { jobId: 'j1', at }),
  JobPromoted: mk('JobPromoted', { jobId: 'j1', leaseId: 'j1:1', expiresAt: null, waitedMs: 5, at }),
  JobScheduled: mk('JobScheduled', { jobId: 'j1', runAt: at + 60 * S, at }),
  JobStarted: mk('JobStarted', { jobId: 'j1', leaseId: 'j1:1', workerId: 'w1', attempt: 1, expiresAt: at + 10 * S, msgId: '41', at }),
  LeaseRenewed: mk('LeaseRenewed', { jobId: 'j1', leaseId: 'j1:1', expiresAt: at + 20 * S, msgId: '41', at }),
  JobCompleted: mk('JobCompleted', { jobId: 'j1', leaseId: 'j1:1', at }),
  JobFailed: mk('JobFailed', { jobId: 'j1', leaseId: 'j1:1', attempt: 1, error: 'boom', retryAt: at + S, at }),
  JobDead: mk('JobDead', { jobId: 'j1', reason: 'no attempt left', at }),
  LeaseExpired: mk('LeaseExpired', { jobId: 'j1', leaseId: 'j1:1', expiresAt: at, at }),
  LeaseRevoked: mk('LeaseRevoked', { jobId: 'j1', leaseId: 'j1:1', by: 'ops', at }),
  SlotReleased: mk('SlotReleased', { jobId: 'j1', leaseId: 'j1:1', reason: 'completed', msgId: '41', at }),
  JobYielded: mk('JobYielded', { jobId: 'j1', leaseId: 'j1:1', attempts: 0, at }),
  JobCancelled: mk('JobCancelled', { jobId: 'j1', by: 'ops', at }),
  ParkedDiscarded: mk('ParkedDiscarded', { jobId: 'j1', by: 'ops', at }),
  JobRejected: mk('JobRejected', { jobId: 'j1', reason: 'key full (limit 2)', at }),
  ParkedReplaced: mk('ParkedReplaced', { jobId: 'j1', by: 'j2', at }),
  KeyPaused: mk('KeyPaused', { by: 'ops', reason: 'vendor outage', at }),
  KeyResumed: mk('KeyResumed', { by: 'ops', reason: null, at: at + S }),
  LimitWaiting: mk('LimitWaiting', { jobId: 'j1', home: 'key:h', limits: ['k'], priority: -1, at }),
  LimitHeld: mk('LimitHeld', { jobId: 'j1', home: 'key:h', limits: ['k'], priority: -1, leaseId: 'j1:1', waitedMs: 5, at: at + S }),
  LimitReleased: mk('LimitReleased', { jobId: 'j1', leaseId: 'j1:1', reason: 'completed', at: at + 2 * S }),
  LimitLeft: mk('LimitLeft', { jobId: 'j1', reason: 'cancelled by ops', at: at + S }),
  JobRetried: mk('JobRetried', { jobId: 'j1', by: 'ops', queue: 'mail', priority: -1, maxAttempts: 3, leaseMs: 10_000, at: at + S }),
  DeadDiscarded: mk('DeadDiscarded', { jobId: 'j1', by: 'ops', at: at + S }),
};
const TYPES = Object.keys(samples) as KeyEventType[];

/** A batch builder: events on one stream, each `tx(...)` one transaction (its own commit), revisions counting from `from`. */
const batchOn = (stream = 'key:k', from = 0, firstCommit = 100n) => {
  const events: ProjectedEvent[] = [];
  let revision = from;
  let commit = firstCommit;
  const b = {
    tx: (...es: KeyEvent[]) => {
      for (const event of es) events.push({ event, stream, revision: revision++, key: keyOfStream(stream), commit });
      commit += 1n;
      return b;
    },
    events,
  };
  return b;
};

const deepFreeze = <T>(value: T): T => {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
};

/** The columns a jsonb_to_recordset($n) in the text declares, by parameter number. */
const recordsets = (text: string): Map<number, string[]> => {
  const out = new Map<number, string[]>();
  for (const m of text.matchAll(/jsonb_to_recordset\(\$(\d+)::jsonb\)\s+AS\s+(?:\w+\s*)?\(([^)]*)\)/g)) {
    out.set(Number(m[1]), m[2]!.split(',').map((c) => c.trim().split(/\s+/)[0]!));
  }
  return out;
};

/**
 * Every $n the text uses is bound and every value is used; each value is what pg sends as is (a
 * string, or an array of strings for `::text[]`/`::bigint[]`); each JSON value parses to an array
 * of rows whose fields are exactly the columns its jsonb_to_recordset declares (a misspelt field
 * would silently read as NULL), or for a new job's row some of them (its nulls are left out); an
 * UPDATE's key list ($2) names exactly its rows.
 */
const expectWellFormed = (s: Statement) => {
  const used = new Set([...s.text.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
  expect([...used].sort((a, b) => a - b), s.text).toEqual(s.values.map((_, i) => i + 1));
  const sets = recordsets(s.text);
  s.values.forEach((v, i) => {
    const columns = sets.get(i + 1);
    if (columns !== undefined) {
      expect(typeof v).toBe('string');
      const rows = JSON.parse(v as string) as Record<string, unknown>[];
      expect(Array.isArray(rows)).toBe(true);
      expect(rows.length).toBeGreaterThan(0);
      // A new job's row leaves its null columns out (read as NULL all the same: job-rows.ts withoutNulls).
      for (const row of rows) {
        const fields = Object.keys(row);
        if (/^\s*INSERT INTO jl_jobs/.test(s.text)) expect(fields.filter((f) => !columns.includes(f)), s.text).toEqual([]);
        else expect(fields.sort(), s.text).toEqual([...columns].sort());
      }
    } else if (Array.isArray(v)) {
      expect(v.length).toBeGreaterThan(0);
      for (const x of v) expect(typeof x).toBe('string');
    } else {
      expect(typeof v, `value $${i + 1} of ${s.text}`).toBe('string');
    }
  });
  if (/job_id = ANY \(\$2::text\[\]\)/.test(s.text)) {
    expect(s.values[1]).toEqual((JSON.parse(s.values[0] as string) as { job_id: string }[]).map((r) => r.job_id));
  }
  // An UPDATE that checks it found its rows ($3) expects exactly as many as it names.
  if (/jl_expect_rows\(count\(\*\), \$3::int/.test(s.text)) expect(s.values[2]).toBe(String((s.values[1] as unknown[]).length));
};

/** The rows of a statement's JSON parameter. */
/** The rows of a statement's JSON value, each with every column its recordset declares (a new job's row leaves its nulls out: they read as NULL). */
const rowsOf = (s: Statement | undefined, n = 0): Record<string, unknown>[] => {
  const columns = recordsets(s!.text).get(n + 1) ?? [];
  return (JSON.parse(s!.values[n] as string) as Record<string, unknown>[]).map((row) => ({ ...Object.fromEntries(columns.map((c) => [c, null])), ...row }));
};
const find = (statements: readonly Statement[], text: string) => statements.filter((s) => s.text === text);

const READ_MODEL_SQL = [UPSERT_KEYS_SQL, PAUSE_KEYS_SQL, INSERT_JOBS_SQL, UPDATE_JOBS_SQL, DELETE_LIMIT_JOBS_SQL, UPSERT_LIMIT_JOBS_SQL];

const readModels = (events: readonly ProjectedEvent[]) => projectReadModels(deepFreeze(events));
const dispatch = (events: readonly ProjectedEvent[]) => projectDispatch(deepFreeze(events));

/** A whole life of j1 up to (and including) the sample event of `type`, in transactions as the decider writes them. */
const lifeUpTo = (type: KeyEventType, stream: string): ProjectedEvent[] => {
  const b = batchOn(stream);
  const solo = !stream.startsWith('key:');
  const enqueued = mk('JobEnqueued', { ...samples.JobEnqueued.data, ...(solo ? { solo: true as const } : {}) });
  if (type === 'KeyLimitSet') return b.tx(samples.KeyLimitSet).events;
  const head = solo ? [enqueued] : [samples.KeyLimitSet, enqueued];
  const started = [samples.SlotAcquired, samples.JobStarted] as const;
  switch (type) {
    case 'JobEnqueued':
      return b.tx(...head, samples.SlotAcquired).events;
    case 'SlotAcquired':
    case 'JobCancelled':
      return b.tx(...head, samples.SlotAcquired).tx(...(type === 'JobCancelled' ? [samples.JobCancelled, { ...samples.SlotReleased, data: { ...samples.SlotReleased.data, reason: 'cancelled' } } as KeyEvent] : [])).events;
    case 'JobParked':
    case 'ParkedDiscarded':
      return b.tx(...head, samples.JobParked).tx(...(type === 'ParkedDiscarded' ? [samples.ParkedDiscarded] : [])).events;
    case 'JobPromoted':
      return b.tx(...head, samples.JobParked).tx(samples.JobPromoted).events;
    case 'JobScheduled':
      return b.tx(...head, samples.JobScheduled).events;
    case 'JobStarted':
    case 'LeaseRenewed':
      return b.tx(...head, samples.SlotAcquired).tx(samples.JobStarted).tx(...(type === 'LeaseRenewed' ? [samples.LeaseRenewed] : [])).events;
    case 'JobCompleted':
    case 'SlotReleased':
      return b.tx(...head, samples.SlotAcquired).tx(samples.JobStarted).tx(samples.JobCompleted, samples.SlotReleased).events;
    case 'JobFailed':
      return b.tx(...head, ...started).tx(samples.JobFailed, samples.SlotReleased, samples.JobScheduled).events;
    case 'JobDead':
      return b.tx(...head, ...started).tx(mk('JobFailed', { ...samples.JobFailed.data, retryAt: null }), samples.JobDead, samples.SlotReleased).events;
    case 'LeaseExpired':
      return b.tx(...head, ...started).tx(samples.LeaseExpired, samples.SlotReleased, samples.JobScheduled).events;
    case 'LeaseRevoked':
      return b.tx(...head, ...started).tx(samples.LeaseRevoked, samples.SlotReleased, samples.JobScheduled).events;
    case 'JobYielded':
      return b.tx(...head, ...started).tx(samples.JobYielded, samples.SlotReleased, samples.JobParked).events;
    case 'JobRejected':
      return b.tx(...head, samples.JobRejected).events;
    // A dead job brought back (and admitted under a new lease), or dropped for good.
    case 'JobRetried':
    case 'DeadDiscarded': {
      const died = b.tx(...head, ...started).tx(mk('JobFailed', { ...samples.JobFailed.data, retryAt: null }), samples.JobDead, samples.SlotReleased);
      return (type === 'JobRetried' ? died.tx(samples.JobRetried, mk('SlotAcquired', { ...samples.SlotAcquired.data, leaseId: 'j1:2', at: at + S })) : died.tx(samples.DeadDiscarded)).events;
    }
    case 'ParkedReplaced':
      return b.tx(...head, samples.JobParked).tx(samples.ParkedReplaced).events;
    case 'KeyPaused':
    case 'KeyResumed':
      return b.tx(...head, samples.SlotAcquired).tx(samples.KeyPaused).tx(...(type === 'KeyResumed' ? [samples.KeyResumed] : [])).events;
    // A guest's visit to the limit key k: it waits, then holds, until its home releases it (or it leaves the line).
    case 'LimitWaiting':
      return b.tx(samples.KeyLimitSet, samples.LimitWaiting).events;
    case 'LimitHeld':
      return b.tx(samples.KeyLimitSet, samples.LimitWaiting).tx(samples.LimitHeld).events;
    case 'LimitReleased':
      return b.tx(samples.KeyLimitSet, samples.LimitHeld).tx(samples.LimitReleased).events;
    case 'LimitLeft':
      return b.tx(samples.KeyLimitSet, samples.LimitWaiting).tx(samples.LimitLeft).events;
  }
};

describe.each([
  ['read models', readModels],
  ['dispatcher', dispatch],
])('%s mapping', (name, project) => {
  it.each(TYPES)('%s alone and in a life: pure, every parameter bound and well-formed, on keyed and unkeyed streams', (type) => {
    for (const stream of ['key:k', 'job:j1']) {
      const batches = [
        [{ event: samples[type], stream, revision: 7, key: keyOfStream(stream), commit: 10n }],
        lifeUpTo(type, stream),
      ];
      for (const batch of batches) {
        const statements = project(batch);
        // Pure: the same batch gives the same statements (and deepFreeze proved the input untouched).
        expect(project(batch)).toEqual(statements);
        statements.forEach(expectWellFormed);
        if (name === 'read models') {
          expect(statements.length).toBeLessThanOrEqual(READ_MODEL_SQL.length);
          for (const s of statements) expect(READ_MODEL_SQL).toContain(s.text);
          // In write order, each statement once.
          const order = statements.map((s) => READ_MODEL_SQL.indexOf(s.text));
          expect(order).toEqual([...new Set(order)].sort((a, b) => a - b));
        }
      }
    }
  });
});

/** The jl_jobs row a batch inserts for j1, or the changes it asks of j1's row from before the batch. */
const insertedRow = (statements: readonly Statement[]) => rowsOf(find(statements, INSERT_JOBS_SQL)[0])[0]!;
const updatedRow = (statements: readonly Statement[]) => rowsOf(find(statements, UPDATE_JOBS_SQL)[0])[0]!;
/** No slot, no place in line: the live row's columns of a job that holds nothing and waits for nothing. */
const RESTING = { lease_id: null, how: null, acquired_at: null, expires_at: null, revoked_by: null, revoked_at: null, revoke_cancels: null, parked_at: null, park_seq: null };

describe('read models', () => {
  it("a job's whole life in one batch (parked, promoted, failed, retried, completed) is one INSERT of its final row, resting: no UPDATE", () => {
    const b = batchOn('key:k', 0)
      .tx(samples.KeyLimitSet, samples.JobEnqueued, samples.JobParked)
      .tx(mk('JobPromoted', { ...samples.JobPromoted.data, at: at + S }))
      .tx(mk('JobStarted', { ...samples.JobStarted.data, at: at + 2 * S }))
      .tx(mk('JobFailed', { ...samples.JobFailed.data, at: at + 3 * S }), mk('SlotReleased', { ...samples.SlotReleased.data, reason: 'failed', at: at + 3 * S }), mk('JobScheduled', { jobId: 'j1', runAt: at + 4 * S, at: at + 3 * S }))
      .tx(mk('SlotAcquired', { jobId: 'j1', leaseId: 'j1:2', expiresAt: null, at: at + 4 * S }))
      .tx(mk('JobStarted', { jobId: 'j1', leaseId: 'j1:2', workerId: 'w2', attempt: 2, expiresAt: at + 15 * S, msgId: '42', at: at + 5 * S }))
      .tx(mk('LeaseRenewed', { jobId: 'j1', leaseId: 'j1:2', expiresAt: at + 16 * S, msgId: '42', at: at + 6 * S }))
      .tx(mk('JobCompleted', { jobId: 'j1', leaseId: 'j1:2', at: at + 7 * S }), mk('SlotReleased', { jobId: 'j1', leaseId: 'j1:2', reason: 'completed', msgId: '42', at: at + 7 * S }));
    const statements = readModels(b.events);
    expect(statements.map((s) => s.text)).toEqual([UPSERT_KEYS_SQL, INSERT_JOBS_SQL]);
    expect(rowsOf(statements[1])).toEqual([
      {
        job_id: 'j1', stream: 'key:k', key: 'k', seq: 1, name: 'email', queue: 'mail', args: { to: ['a'] }, priority: -1, max_attempts: 3, lease_ms: 10_000, enqueued_at: at, limits: null,
        status: 'completed', attempts: 2, run_at: null, started_at: at + 5 * S, finished_at: at + 7 * S, last_error: 'boom', finish_reason: null,
        worker_id: 'w2', ...RESTING,
        // the renewal changes the lease's expiry only
        updated_at: at + 7 * S,
      },
    ]);
    expect(rowsOf(statements[0])).toEqual([{ stream: 'key:k', key: 'k', concurrency_limit: 2, lease_ms: 30_000, updated_at: at }]);
  });

  it('a job still running at the end of the batch: its row holds the slot, started (expiry and worker set)', () => {
    const b = batchOn('key:k', 0).tx(samples.KeyLimitSet, samples.JobEnqueued, samples.SlotAcquired).tx(samples.JobStarted).tx(samples.LeaseRenewed);
    const statements = readModels(b.events);
    expect(statements.map((s) => s.text)).toEqual([UPSERT_KEYS_SQL, INSERT_JOBS_SQL]);
    expect(insertedRow(statements)).toMatchObject({
      status: 'running', attempts: 1, worker_id: 'w1', lease_id: 'j1:1', how: 'acquired', acquired_at: at, expires_at: at + 20 * S, started_at: at, updated_at: at,
      revoked_by: null, parked_at: null, park_seq: null,
    });
  });

  it('an admission nobody started has no expiry (expires_at null), whatever an older event said: status holding, the row a worker claims', () => {
    for (const event of [samples.SlotAcquired, mk('SlotAcquired', { ...samples.SlotAcquired.data, expiresAt: at + 30 * S }), mk('JobPromoted', { ...samples.JobPromoted.data, expiresAt: at + 30 * S })]) {
      expect(updatedRow(readModels(batchOn().tx(event).events))).toMatchObject({
        status: 'holding', expires_at: null, lease_id: 'j1:1', acquired_at: at, how: event.type === 'SlotAcquired' ? 'acquired' : 'promoted', parked_at: null, run_at: null,
      });
    }
  });

  it('events on rows from before the batch become one UPDATE, keyed by job id, however many jobs', () => {
    const events: ProjectedEvent[] = [];
    let commit = 500n;
    for (let i = 0; i < 100; i++) {
      const jobId = `j${i}`;
      const b = batchOn(`key:k${i % 7}`, 10 + i, commit);
      const leaseId = `${jobId}:1`;
      switch (i % 5) {
        case 0:
          b.tx(mk('JobStarted', { jobId, leaseId, workerId: 'w', attempt: 1, expiresAt: at + S, at }));
          break;
        case 1:
          b.tx(mk('JobCompleted', { jobId, leaseId, at }), mk('SlotReleased', { jobId, leaseId, reason: 'completed', at }), mk('JobPromoted', { jobId: `p${i}`, leaseId: `p${i}:1`, expiresAt: null, waitedMs: 1, at }));
          break;
        case 2:
          b.tx(mk('LeaseRenewed', { jobId, leaseId, expiresAt: at + 2 * S, at }));
          break;
        case 3:
          b.tx(mk('KeyLimitSet', { limit: 3, leaseMs: S, by: 'ops', at }), mk('JobEnqueued', { ...samples.JobEnqueued.data, jobId, at }), mk('JobParked', { jobId, at }));
          break;
        case 4:
          b.tx(mk('JobYielded', { jobId, leaseId, attempts: 0, at }), mk('SlotReleased', { jobId, leaseId, reason: 'yielded', at }), mk('JobParked', { jobId, at }));
          break;
      }
      events.push(...b.events);
      commit += 1n;
    }
    events.sort((a, b) => Number(a.commit - b.commit));
    const statements = readModels(events);
    expect(statements.map((s) => s.text)).toEqual([UPSERT_KEYS_SQL, INSERT_JOBS_SQL, UPDATE_JOBS_SQL]);
    statements.forEach(expectWellFormed);
    const [keys, inserted, updated] = statements;
    expect(rowsOf(keys).map((r) => r.stream).sort()).toEqual(['key:k0', 'key:k1', 'key:k2', 'key:k3', 'key:k4', 'key:k5', 'key:k6']);
    // The enqueued j3, j8, ... parked in their enqueue order.
    expect(rowsOf(inserted)).toHaveLength(20);
    expect(rowsOf(inserted).every((r) => r.status === 'parked' && r.park_seq === r.seq && r.parked_at === at)).toBe(true);
    // Started, completed, promoted, renewed, yielded: 20 each.
    expect(rowsOf(updated)).toHaveLength(100);
    expect(updated!.values[2]).toBe('100');
    const byId = new Map(rowsOf(updated).map((r) => [r.job_id, r]));
    expect(byId.get('j0')).toMatchObject({ status: 'running', expires_at: at + S });
    expect(byId.get('j1')).toMatchObject({ status: 'completed', lease_id: null });
    expect(byId.get('p1')).toMatchObject({ status: 'holding', lease_id: 'p1:1', parked_at: null });
    expect(byId.get('j2')).toMatchObject({ expires_at: at + 2 * S, updated_at: null });
    expect(byId.get('j4')).toMatchObject({ status: 'parked', lease_id: null, parked_at: at, parked_revision: 16 });
  });

  it('a renewal of a lease from before the batch moves its expiry only (updated_at stays: the UPDATE keeps the row\'s)', () => {
    const statements = readModels(batchOn().tx(samples.LeaseRenewed).events);
    expect(statements.map((s) => s.text)).toEqual([UPDATE_JOBS_SQL]);
    expect(updatedRow(statements)).toMatchObject({ job_id: 'j1', expires_at: at + 20 * S, updated_at: null, status: null });
    expect(UPDATE_JOBS_SQL).toContain('updated_at = coalesce(to_timestamp(x.updated_at / 1000), j.updated_at)');
  });

  it('a start of a lease from before the batch: running with the attempt, the worker and the expiry', () => {
    const statements = readModels(batchOn().tx(samples.JobStarted).events);
    expect(statements.map((s) => s.text)).toEqual([UPDATE_JOBS_SQL]);
    expect(updatedRow(statements)).toMatchObject({ job_id: 'j1', status: 'running', attempts: 1, worker_id: 'w1', started_at: at, expires_at: at + 10 * S, updated_at: at, yield_lease: null });
  });

  it('a release frees the row: no lease, no expiry, not stopping; a finished job keeps its status', () => {
    const before = readModels(batchOn().tx(samples.JobCompleted, samples.SlotReleased).events);
    expect(before.map((s) => s.text)).toEqual([UPDATE_JOBS_SQL]);
    expect(updatedRow(before)).toMatchObject({ status: 'completed', lease_id: null, how: null, acquired_at: null, expires_at: null, revoked_by: null, finished_at: at });
    const within = readModels(batchOn().tx(samples.SlotAcquired).tx(samples.JobStarted).tx(samples.JobCompleted, samples.SlotReleased).events);
    expect(within.map((s) => s.text)).toEqual([UPDATE_JOBS_SQL]);
    expect(updatedRow(within)).toMatchObject({ status: 'completed', lease_id: null, expires_at: null });
  });

  it('parking: the row takes its place in line (the JobParked revision for a job under further limits, its seq for the others: the UPDATE picks); a promotion or a finish takes it out', () => {
    const parked = readModels(batchOn().tx(samples.JobYielded, samples.SlotReleased, samples.JobParked).events);
    expect(updatedRow(parked)).toMatchObject({ job_id: 'j1', status: 'parked', parked_at: at, parked_revision: 2, lease_id: null });
    expect(UPDATE_JOBS_SQL).toContain('WHEN j.limits IS NULL THEN CASE WHEN x.m & 512 <> 0 THEN x.seq ELSE j.seq END ELSE x.parked_revision END');
    expect(updatedRow(readModels(batchOn().tx(samples.JobPromoted).events))).toMatchObject({ status: 'holding', parked_at: null, parked_revision: null });
    const through = readModels(batchOn().tx(samples.JobParked).tx(samples.JobPromoted).events);
    expect(updatedRow(through)).toMatchObject({ status: 'holding', parked_at: null });
    // Discarded or cancelled while parked: out of the line, finished.
    for (const event of [samples.ParkedDiscarded, samples.JobCancelled]) expect(updatedRow(readModels(batchOn().tx(event).events))).toMatchObject({ parked_at: null, finished_at: at });
    // A job enqueued and parked in the batch, under further limits or not.
    const mine = insertedRow(readModels(batchOn('key:k', 4).tx(samples.JobEnqueued, samples.JobParked).events));
    expect(mine).toMatchObject({ seq: 4, park_seq: 4, parked_at: at });
    const guest = insertedRow(readModels(batchOn('key:k', 4).tx(mk('JobEnqueued', { ...samples.JobEnqueued.data, limits: ['m'] }), samples.JobParked).tx(mk('JobParked', { jobId: 'j1', at: at + S })).events));
    expect(guest).toMatchObject({ seq: 4, park_seq: 6, parked_at: at + S });
  });

  it('finishing events set the status and reason; a holder keeps its slot until the SlotReleased that follows', () => {
    const finishes = { JobCompleted: ['completed', null], JobDead: ['dead', 'no attempt left'], JobCancelled: ['cancelled', 'cancelled by ops'], ParkedDiscarded: ['discarded', 'discarded by ops'] } as const;
    for (const [type, [status, reason]] of Object.entries(finishes)) {
      const row = updatedRow(readModels(batchOn().tx(samples[type as keyof typeof finishes]).events));
      expect(row).toEqual(expect.objectContaining({ job_id: 'j1', status, finish_reason: reason, finished_at: at, run_at: null }));
      // No SLOT bit: the lease columns keep the row's.
      expect((row.m as number) & 256).toBe(0);
    }
    // Released to go elsewhere (expiry, then scheduled for a retry): the status is where it went, never pending.
    const retried = readModels(batchOn().tx(samples.LeaseExpired, samples.JobFailed, samples.SlotReleased, samples.JobScheduled).events);
    expect(updatedRow(retried)).toMatchObject({ status: 'scheduled', run_at: at + 60 * S, lease_id: null, last_error: 'boom', attempts: 1 });
  });

  it('LeaseExpired changes nothing by itself (its SlotReleased does); LeaseRevoked marks the holder stopping, its lease columns only', () => {
    expect(readModels(batchOn().tx(samples.LeaseExpired).events)).toEqual([]);
    const revoked = readModels(batchOn().tx(mk('LeaseRevoked', { ...samples.LeaseRevoked.data, cancel: true })).events);
    expect(revoked.map((s) => s.text)).toEqual([UPDATE_JOBS_SQL]);
    expect(updatedRow(revoked)).toMatchObject({ job_id: 'j1', m: 2048, revoked_by: samples.LeaseRevoked.data.by, revoked_at: at, revoke_cancels: true, updated_at: null });
  });

  it('a yield records the attempts it hands back (a legacy one without them: the UPDATE asks the row whether the lease was started); a job without a key has key null and no jl_keys row', () => {
    expect(updatedRow(readModels(batchOn().tx(samples.JobYielded).events))).toMatchObject({ attempts: 0, yield_lease: null });
    const legacy = mk('JobYielded', { jobId: 'j1', leaseId: 'j1:1', at });
    expect(updatedRow(readModels(batchOn().tx(legacy).events))).toMatchObject({ yield_lease: 'j1:1' });
    expect(UPDATE_JOBS_SQL).toContain("x.yield_lease IS NOT NULL AND j.lease_id = x.yield_lease AND j.status = 'running'");
    // Started in the batch: the batch knows, and hands the attempt back itself.
    expect(updatedRow(readModels(batchOn().tx(samples.JobStarted).tx(legacy).events))).toMatchObject({ attempts: 0, yield_lease: null });
    const solo = readModels(batchOn('job:j1').tx(mk('JobEnqueued', { ...samples.JobEnqueued.data, solo: true }), samples.SlotAcquired).events);
    expect(solo.map((s) => s.text)).toEqual([INSERT_JOBS_SQL]);
    expect(insertedRow(solo)).toMatchObject({ job_id: 'j1', stream: 'job:j1', key: null, status: 'holding', lease_id: 'j1:1' });
    // An older solo stream did record a KeyLimitSet of 1: not a key a dashboard lists.
    expect(readModels(batchOn('job:j1').tx(samples.KeyLimitSet).events)).toEqual([]);
  });

  it('a job under further limits records them in jl_jobs.limits; under none (absent or empty), null', () => {
    const limited = readModels(batchOn('key:h').tx(mk('JobEnqueued', { ...samples.JobEnqueued.data, limits: ['k', 'm'] }), samples.JobParked).events);
    expect(rowsOf(find(limited, INSERT_JOBS_SQL)[0])[0]).toMatchObject({ job_id: 'j1', stream: 'key:h', limits: ['k', 'm'], status: 'parked' });
    for (const limits of [undefined, []]) {
      const enqueued = mk('JobEnqueued', { ...samples.JobEnqueued.data, ...(limits === undefined ? {} : { limits }) });
      expect(rowsOf(find(readModels(batchOn().tx(enqueued, samples.SlotAcquired).events), INSERT_JOBS_SQL)[0])[0]).toMatchObject({ limits: null });
    }
  });

  it("a guest's events write jl_limit_jobs only (its home's events write its other rows): a wait is an upsert of its place in line, at the event's revision", () => {
    const statements = readModels(batchOn('key:k', 4).tx(samples.LimitWaiting).events);
    expect(statements.map((s) => s.text)).toEqual([UPSERT_LIMIT_JOBS_SQL]);
    expect(rowsOf(statements[0])).toEqual([{ stream: 'key:k', key: 'k', job_id: 'j1', home: 'key:h', status: 'parked', lease_id: null, since: at, priority: -1, seq: 4 }]);
    // A hold of a guest the batch has not seen (it may wait in a row from before the batch): an
    // upsert too, which keeps that row's priority and seq (ON CONFLICT sets only where it is and since when).
    const held = readModels(batchOn('key:k', 9).tx(samples.LimitHeld).events);
    expect(held.map((s) => s.text)).toEqual([UPSERT_LIMIT_JOBS_SQL]);
    expect(rowsOf(held[0])).toEqual([{ stream: 'key:k', key: 'k', job_id: 'j1', home: 'key:h', status: 'holding', lease_id: 'j1:1', since: at + S, priority: -1, seq: 9 }]);
    expect(UPSERT_LIMIT_JOBS_SQL).toMatch(/ON CONFLICT \(stream, job_id\) DO UPDATE SET status = excluded.status, lease_id = excluded.lease_id, since = excluded.since$/);
  });

  it('a guest waiting then held in one batch keeps the seq of its wait; released or leaving, its row goes (by stream and job: it may be a guest of other keys too)', () => {
    const through = readModels(batchOn('key:k', 4).tx(samples.LimitWaiting).tx(samples.LimitHeld).events);
    expect(through.map((s) => s.text)).toEqual([UPSERT_LIMIT_JOBS_SQL]);
    expect(rowsOf(through[0])).toEqual([expect.objectContaining({ status: 'holding', lease_id: 'j1:1', since: at + S, seq: 4 })]);
    for (const event of [samples.LimitReleased, samples.LimitLeft]) {
      const gone = readModels(batchOn('key:k').tx(event).events);
      expect(gone.map((s) => s.text)).toEqual([DELETE_LIMIT_JOBS_SQL]);
      expect(rowsOf(gone[0])).toEqual([{ stream: 'key:k', job_id: 'j1' }]);
      expect(gone[0]!.values[1]).toEqual(['j1']);
    }
    // A whole visit in the batch: the row goes (a row from before the batch could have been its wait), none is written.
    const visit = readModels(batchOn('key:k', 4).tx(samples.LimitWaiting).tx(samples.LimitHeld).tx(samples.LimitReleased).events);
    expect(visit.map((s) => s.text)).toEqual([DELETE_LIMIT_JOBS_SQL]);
  });

  it('a guest released and back in the same batch (a retry parks it again): the old row goes, a new one takes a new place in line', () => {
    const statements = readModels(
      batchOn('key:k', 4)
        .tx(samples.LimitHeld)
        .tx(samples.LimitReleased, mk('LimitWaiting', { ...samples.LimitWaiting.data, at: at + 2 * S }))
        .events,
    );
    expect(statements.map((s) => s.text)).toEqual([DELETE_LIMIT_JOBS_SQL, UPSERT_LIMIT_JOBS_SQL]);
    expect(rowsOf(statements[1])).toEqual([{ stream: 'key:k', key: 'k', job_id: 'j1', home: 'key:h', status: 'parked', lease_id: null, since: at + 2 * S, priority: -1, seq: 6 }]);
    // Guests of two keys and two jobs: one statement per table, a row per key and job.
    const two = [
      ...batchOn('key:k', 0).tx(samples.LimitHeld, mk('LimitWaiting', { ...samples.LimitWaiting.data, jobId: 'j2' })).events,
      ...batchOn('key:m', 0, 101n).tx(mk('LimitHeld', { ...samples.LimitHeld.data, limits: ['k', 'm'] })).tx(samples.LimitReleased).events,
    ];
    const both = readModels(two);
    expect(both.map((s) => s.text)).toEqual([DELETE_LIMIT_JOBS_SQL, UPSERT_LIMIT_JOBS_SQL]);
    expect(rowsOf(both[0])).toEqual([{ stream: 'key:m', job_id: 'j1' }]);
    expect(rowsOf(both[1]).map((r) => [r.stream, r.job_id, r.status])).toEqual([['key:k', 'j1', 'holding'], ['key:k', 'j2', 'parked']]);
  });

  it('jl_keys takes the last limit of the batch', () => {
    const statements = readModels(batchOn().tx(samples.KeyLimitSet).tx(mk('KeyLimitSet', { limit: 5, leaseMs: 9_000, by: 'ops', at: at + S })).events);
    expect(statements.map((s) => rowsOf(s))).toEqual([[{ stream: 'key:k', key: 'k', concurrency_limit: 5, lease_ms: 9_000, updated_at: at + S }]]);
  });

  it('an empty batch is no statement; the projection is rebuildable over the three jl_ tables in write order (jl_slots, jl_parked are views of jl_jobs), for key and job streams only', () => {
    expect(readModels([])).toEqual([]);
    const p = createReadModelProjections();
    expect(p.rebuild?.tables).toEqual(['jl_keys', 'jl_jobs', 'jl_limit_jobs']);
    expect(p.rebuild?.tables).toEqual(READ_MODEL_TABLES);
    expect(['key:a', 'job:b', 'queue:c', 'other'].map(p.handles)).toEqual([true, true, false, false]);
  });
});

describe('dispatcher', () => {
  const woken = (statements: readonly Statement[]) => find(statements, WAKE_SQL).map((s) => s.values[0]);

  it('wakes the readers of the queues of the admissions not started in their own transaction: one NOTIFY statement over their rows, all of a batch at once', () => {
    for (const type of ['SlotAcquired', 'JobPromoted'] as const) {
      const statements = dispatch(batchOn().tx(samples[type]).events);
      expect(statements).toEqual([{ text: WAKE_SQL, values: [['j1'], ['key:k']] }]);
    }
    expect(WAKE_SQL).toContain(`pg_notify('${QUEUE_CHANNEL}', q.queue)`);
    expect(WAKE_SQL).toMatch(/SELECT DISTINCT queue FROM jl_jobs WHERE job_id = ANY\(\$1::text\[\]\) AND stream = ANY\(\$2::text\[\]\)/);
    const many = batchOn()
      .tx(mk('SlotAcquired', { jobId: 'a', leaseId: 'a:1', expiresAt: null, at }), mk('SlotAcquired', { jobId: 'b', leaseId: 'b:2', expiresAt: null, at }))
      .tx(mk('JobPromoted', { jobId: 'c', leaseId: 'c:3', expiresAt: null, waitedMs: 0, at }));
    expect(woken(dispatch(many.events))).toEqual([['a', 'b', 'c']]);
  });

  it('wakes nobody for an admission started in the same transaction (direct handoff): it returns the job for its worker instead', () => {
    // Complete j0 with handOffTo: its slot goes to j1, started for the same worker in the same append.
    const b = batchOn().tx(
      mk('JobCompleted', { jobId: 'j0', leaseId: 'j0:0', at }),
      mk('SlotReleased', { jobId: 'j0', leaseId: 'j0:0', reason: 'completed', msgId: '40', at }),
      mk('JobPromoted', { jobId: 'j1', leaseId: 'j1:2', expiresAt: null, waitedMs: 5, at }),
      mk('JobStarted', { jobId: 'j1', leaseId: 'j1:2', workerId: 'w1', attempt: 1, expiresAt: at + S, at }),
    );
    const statements = dispatch(b.events);
    expect(statements).toEqual([{ text: HANDED_OFF_SQL, values: [['j1'], ['key:k']], returns: 'handedOff' }]);
    expect(HANDED_OFF_SQL).toMatch(/"jobId", key, name, args FROM jl_jobs/);
  });

  it('an admission started in a LATER transaction of the batch was claimed by a reader: no wake-up, nothing handed off', () => {
    expect(dispatch(batchOn().tx(samples.JobPromoted).tx(samples.JobStarted).events)).toEqual([]);
  });

  it('wakes nobody for an admission released within the batch (same or later transaction): nothing can claim it', () => {
    const cancelled = dispatch(batchOn().tx(samples.SlotAcquired, samples.JobCancelled, mk('SlotReleased', { jobId: 'j1', leaseId: 'j1:1', reason: 'cancelled', at })).events);
    expect(cancelled).toEqual([]);
    const revokedLater = dispatch(batchOn().tx(samples.SlotAcquired).tx(samples.LeaseRevoked, mk('SlotReleased', { jobId: 'j1', leaseId: 'j1:1', reason: 'revoked', at }), samples.JobParked).events);
    expect(revokedLater.map((s) => s.text)).toEqual([LEASE_LOST_SQL]);
    // The next admission of the same job, after the release, does wake.
    const readmitted = dispatch(batchOn().tx(samples.SlotAcquired).tx(samples.LeaseRevoked, mk('SlotReleased', { jobId: 'j1', leaseId: 'j1:1', reason: 'revoked', at }), mk('JobPromoted', { ...samples.JobPromoted.data, leaseId: 'j1:2' })).events);
    expect(woken(readmitted)).toEqual([['j1']]);
  });

  it('a release, a renewal or a start asks nothing: the read models move the row', () => {
    expect(dispatch(batchOn().tx(samples.JobCompleted, samples.SlotReleased).events)).toEqual([]);
    expect(dispatch(batchOn().tx(samples.LeaseRenewed).events)).toEqual([]);
    expect(dispatch(batchOn().tx(samples.JobStarted).events)).toEqual([]);
  });

  it('announces a lease taken from its holder (revoked, expired) on the lease-lost channel, with the lease ids, in one statement', () => {
    for (const type of ['LeaseExpired', 'LeaseRevoked'] as const) {
      expect(dispatch(batchOn().tx(samples[type]).events)).toEqual([{ text: LEASE_LOST_SQL, values: [['j1:1']] }]);
    }
    const both = batchOn().tx(samples.LeaseExpired).tx(mk('LeaseRevoked', { jobId: 'j2', leaseId: 'j2:5', by: 'ops', at }));
    expect(dispatch(both.events)).toEqual([{ text: LEASE_LOST_SQL, values: [['j1:1', 'j2:5']] }]);
    expect(LEASE_LOST_SQL).toContain(`pg_notify('${LEASE_LOST_CHANNEL}', lease)`);
  });

  it('every other event asks nothing', () => {
    for (const type of ['KeyLimitSet', 'JobEnqueued', 'JobParked', 'JobScheduled', 'JobCompleted', 'JobFailed', 'JobDead', 'JobYielded', 'JobCancelled', 'ParkedDiscarded', 'LimitWaiting', 'LimitHeld', 'LimitReleased', 'LimitLeft'] as const) {
      expect(dispatch(batchOn().tx(samples[type]).events)).toEqual([]);
    }
  });

  it('asks in this order: wake, lease lost, handed off', () => {
    const b = batchOn()
      .tx(mk('SlotAcquired', { jobId: 'a', leaseId: 'a:1', expiresAt: null, at }))
      .tx(mk('SlotReleased', { jobId: 'c', leaseId: 'c:1', reason: 'completed', at }), mk('JobPromoted', { jobId: 'd', leaseId: 'd:1', expiresAt: null, waitedMs: 0, at }), mk('JobStarted', { jobId: 'd', leaseId: 'd:1', workerId: 'w', attempt: 1, expiresAt: at + S, at }))
      .tx(mk('LeaseExpired', { jobId: 'e', leaseId: 'e:1', expiresAt: at, at }), mk('SlotReleased', { jobId: 'e', leaseId: 'e:1', reason: 'expired', at }));
    expect(dispatch(b.events).map((s) => s.text)).toEqual([WAKE_SQL, LEASE_LOST_SQL, HANDED_OFF_SQL]);
  });

  it('is never rebuildable: a replay would only notify again (rebuilding the read models makes the admitted rows claimable)', () => {
    const dispatcher = createDispatcher();
    expect(dispatcher.rebuild).toBeUndefined();
    expect(() => rebuildSpec(dispatcher)).toThrow(NotRebuildableError);
    expect(['key:a', 'job:b', 'queue:c'].map(dispatcher.handles)).toEqual([true, true, false]);
  });
});

describe('runner helpers', () => {
  it('projectAll gives each projection only the streams it handles, in projection order, and skips one with none', () => {
    const seen: string[][] = [];
    const recorder = (name: string, prefix: string): Projection => ({
      name,
      handles: (s) => s.startsWith(prefix),
      project: (events) => {
        seen.push(events.map((e) => e.stream));
        return [statement(`-- ${name}`, events.length)];
      },
    });
    const events: ProjectedEvent[] = [
      { event: samples.KeyLimitSet, stream: 'key:a', revision: 0, key: 'a', commit: 1n },
      { event: samples.JobEnqueued, stream: 'job:j1', revision: 0, key: null, commit: 1n },
      { event: samples.JobParked, stream: 'key:a', revision: 1, key: 'a', commit: 2n },
    ];
    const statements = projectAll([recorder('keys', 'key:'), recorder('none', 'queue:'), recorder('all', '')], events);
    expect(statements).toEqual([statement('-- keys', 2), statement('-- all', 3)]);
    expect(seen).toEqual([['key:a', 'key:a'], ['key:a', 'job:j1', 'key:a']]);
  });

  it('toProjected decodes a recorded event and takes its commit from the position, its key from the stream', () => {
    const recorded: RecordedEvent = {
      stream: 'key:a:b', revision: 3, position: { commit: 77n, prepare: 9n }, type: 'JobParked', data: { jobId: 'j1', at }, metadata: {}, eventId: 'e', created: new Date(at),
    };
    expect(toProjected(recorded)).toEqual({ event: samples.JobParked, stream: 'key:a:b', revision: 3, key: 'a:b', commit: 77n });
    expect(() => toProjected({ ...recorded, data: { at } })).toThrow(/does not decode/);
  });
});

describe('streams', () => {
  it('key of a stream', () => {
    expect(keyOfStream('key:a:b')).toBe('a:b');
    expect(keyOfStream('key:')).toBe('');
    expect(keyOfStream('job:x')).toBeNull();
    expect(isLedgerStream('key:')).toBe(true);
    expect(isLedgerStream('job:x')).toBe(true);
    expect(isLedgerStream('snapshots')).toBe(false);
  });
});

import type pg from 'pg';
import type { DispatchQueue } from '../../projections/dispatcher.js';
import type { Statement } from '../../projections/projection.js';
import type { Queryable } from '../../projections/transaction.js';
import { QueueName } from '../../domain/values.js';
import { Notifications } from '../postgres/listener.js';

/**
 * The dispatch queue: PGMQ semantics (send, read with a visibility timeout, archive/delete) in
 * our own SQL over the tables of migration 0002 (one set of tables for every queue).
 *
 * Delivery is at least once: a message read and not archived/deleted before its visibility
 * timeout (vt) passes is handed out again, with read_ct + 1. Consumers heartbeat long work with
 * setVt/setVtMany and finish with archive/delete.
 *
 * Times are the statement's start (statement_timestamp()), not the transaction's: a send or a
 * read inside a long caller transaction counts its delay or timeout from the statement. Every
 * method that writes takes an optional `db` (a PoolClient in a transaction, say) so the write
 * commits or rolls back with the caller's other writes; without it the statement runs on the
 * pool in a transaction of its own. Every statement below is ONE statement on purpose, so it is
 * atomic on its own and never needs a transaction of ours.
 */

export interface QueueMessage<T = unknown> {
  /** bigint, as a decimal string. */
  readonly msgId: string;
  /** Deliveries so far, this one included (1 on the first read). */
  readonly readCt: number;
  readonly enqueuedAt: Date;
  /** When the message becomes visible again unless archived, deleted or its vt is moved. */
  readonly vt: Date;
  readonly message: T;
}

export interface QueueMetrics {
  readonly queue: string;
  /** Messages in the queue, visible or not (in flight, delayed). */
  readonly depth: number;
  /** Messages a read would get now. */
  readonly visibleNow: number;
  /** Age of the oldest message in the queue (by enqueued_at), null when empty. */
  readonly oldestAgeMs: number | null;
  /** Messages ever sent to the queue and committed. */
  readonly totalSent: number;
}

/** NOTIFY channel of sends; the payload is the queue name. */
export const QUEUE_CHANNEL = 'jobledger_queue';

const MSG_ID = /^[0-9]{1,19}$/;

/** A queue name that is not a QueueName (the domain's one rule: 1-63 letters, digits, "_", "." or "-", not starting with "." or "-"). Nothing was written. */
export class InvalidQueueNameError extends RangeError {
  override readonly name = 'InvalidQueueNameError';
  constructor(readonly queue: unknown) {
    super(
      `Invalid queue name ${JSON.stringify(queue)}: \`queue\` must be 1-63 characters, each a letter, digit, "_", "." or "-", the first not "." or "-"`,
    );
  }
}

interface Opts {
  readonly db?: Queryable;
}

interface MessageRow {
  msg_id: string;
  read_ct: number;
  enqueued_at: Date;
  vt: Date;
  message: unknown;
}

export class PgQueue {
  private readonly notifications: Notifications;

  /** The pool is the caller's: PgQueue never ends it. `notifications`: a process's shared LISTEN connection (one of its own otherwise). */
  constructor(
    private readonly pool: pg.Pool,
    notifications?: Notifications,
  ) {
    this.notifications = notifications ?? new Notifications(pool.options);
  }

  /** Creates the queue if it does not exist. Sends create their queue too; this is for setup. */
  async create(queue: string, opts: Opts = {}): Promise<void> {
    checkQueue(queue);
    await (opts.db ?? this.pool).query(CREATE_SQL, [queue]);
  }

  /** Sends one message; returns its id. See sendBatch. */
  async send<T>(queue: string, message: T, opts: { delayMs?: number; db?: Queryable } = {}): Promise<string> {
    const [id] = await this.sendBatch(queue, [message], opts);
    return id!;
  }

  /**
   * Sends messages in one statement (so all or none), in order: their ids increase along the
   * array. Creates the queue if missing. Visible to read() after `delayMs` (default 0) and once
   * the sending transaction commits; a NOTIFY on QUEUE_CHANNEL goes out at that commit.
   * Messages are stored as JSON (JSON.stringify; undefined becomes null).
   */
  async sendBatch<T>(
    queue: string,
    messages: readonly T[],
    opts: { delayMs?: number; db?: Queryable } = {},
  ): Promise<string[]> {
    checkQueue(queue);
    const delayMs = checkMs('delayMs', opts.delayMs ?? 0);
    if (messages.length === 0) return [];
    const payload = JSON.stringify(messages.map((message) => (message === undefined ? null : message)));
    const { rows } = await (opts.db ?? this.pool).query<{ ids: string[] }>({
      name: 'jobledger_queue_send',
      text: SEND_SQL,
      values: [queue, payload, delayMs],
    });
    return rows[0]!.ids;
  }

  /**
   * Hands out up to `qty` visible messages and hides them for `vtMs` (read_ct + 1). Picks the
   * ones visible longest first (vt order, then msg_id: for messages sent without delay and not
   * read before, that is send order); returns them by ascending msgId. Concurrent readers never
   * get the same message: each skips the rows another reader is locking.
   */
  async read<T>(queue: string, vtMs: number, qty: number, opts: Opts = {}): Promise<QueueMessage<T>[]> {
    checkQueue(queue);
    checkMs('vtMs', vtMs);
    if (!Number.isSafeInteger(qty) || qty < 1) throw new RangeError(`qty must be a positive integer, got ${qty}`);
    const { rows } = await (opts.db ?? this.pool).query<MessageRow>({
      name: 'jobledger_queue_read',
      text: READ_SQL,
      values: [queue, vtMs, qty],
    });
    return rows.map(toMessage<T>);
  }

  /**
   * Makes the message visible again `vtMs` from now (0: at once), whether or not it is visible
   * now; undefined when it is no longer in the queue. It does not check who read it last: a
   * heartbeat sent after the timeout passed extends whoever read the message since.
   */
  async setVt<T>(queue: string, msgId: string, vtMs: number, opts: Opts = {}): Promise<QueueMessage<T> | undefined> {
    checkQueue(queue);
    checkMsgId(msgId);
    checkMs('vtMs', vtMs);
    const { rows } = await (opts.db ?? this.pool).query<MessageRow>({
      name: 'jobledger_queue_set_vt',
      text: SET_VT_SQL,
      values: [queue, msgId, vtMs],
    });
    return rows[0] === undefined ? undefined : toMessage<T>(rows[0]);
  }

  /** setVt for many messages in one statement (a batched heartbeat); returns how many were still there. */
  async setVtMany(queue: string, msgIds: readonly string[], vtMs: number, opts: Opts = {}): Promise<number> {
    checkQueue(queue);
    msgIds.forEach(checkMsgId);
    checkMs('vtMs', vtMs);
    if (msgIds.length === 0) return 0;
    const result = await (opts.db ?? this.pool).query({
      name: 'jobledger_queue_set_vt_many',
      text: SET_VT_MANY_SQL,
      values: [queue, msgIds, vtMs],
    });
    return result.rowCount ?? 0;
  }

  /** Moves the message to queue_archive; false when it is not in the queue (already archived or deleted). */
  async archive(queue: string, msgId: string, opts: Opts = {}): Promise<boolean> {
    return (await this.archiveMany(queue, [msgId], opts)).length === 1;
  }

  /** Moves messages to queue_archive in one statement; returns the ids actually moved, ascending. */
  async archiveMany(queue: string, msgIds: readonly string[], opts: Opts = {}): Promise<string[]> {
    checkQueue(queue);
    msgIds.forEach(checkMsgId);
    if (msgIds.length === 0) return [];
    const { rows } = await (opts.db ?? this.pool).query<{ msg_id: string }>({
      name: 'jobledger_queue_archive',
      text: ARCHIVE_SQL,
      values: [queue, msgIds],
    });
    return rows.map((row) => row.msg_id);
  }

  /** Deletes the message for good; false when it is not in the queue. */
  async delete(queue: string, msgId: string, opts: Opts = {}): Promise<boolean> {
    checkQueue(queue);
    checkMsgId(msgId);
    const result = await (opts.db ?? this.pool).query({
      name: 'jobledger_queue_delete',
      text: DELETE_SQL,
      values: [queue, msgId],
    });
    return (result.rowCount ?? 0) > 0;
  }

  /**
   * Reads and deletes the oldest visible message in one statement (no timeout, no redelivery:
   * at most once). readCt counts this delivery, like read's.
   */
  async pop<T>(queue: string, opts: Opts = {}): Promise<QueueMessage<T> | undefined> {
    checkQueue(queue);
    const { rows } = await (opts.db ?? this.pool).query<MessageRow>({
      name: 'jobledger_queue_pop',
      text: POP_SQL,
      values: [queue],
    });
    return rows[0] === undefined ? undefined : toMessage<T>(rows[0]);
  }

  /** Deletes every message of the queue, in flight or not (not the archive); returns how many. */
  async purge(queue: string, opts: Opts = {}): Promise<number> {
    checkQueue(queue);
    const result = await (opts.db ?? this.pool).query({
      name: 'jobledger_queue_purge',
      text: PURGE_SQL,
      values: [queue],
    });
    return result.rowCount ?? 0;
  }

  /** Depth, visible count, oldest age and total sent, from one snapshot. Zeros for an unknown queue. */
  async metrics(queue: string): Promise<QueueMetrics> {
    checkQueue(queue);
    const { rows } = await this.pool.query<{
      depth: string;
      visible_now: string;
      oldest_age_ms: number | null;
      total_sent: string;
    }>({ name: 'jobledger_queue_metrics', text: METRICS_SQL, values: [queue] });
    const row = rows[0]!;
    return {
      queue,
      depth: Number(row.depth),
      visibleNow: Number(row.visible_now),
      oldestAgeMs: row.oldest_age_ms === null ? null : Math.max(0, Math.round(row.oldest_age_ms)),
      totalSent: Number(row.total_sent),
    };
  }

  /**
   * Calls `wake` when a message is sent to `queue` (NOTIFY, delivered at the sender's commit;
   * never for a rolled-back send). Also calls it once the subscription is listening, and after
   * each reconnect of the listening connection, since notifications may have been missed: a
   * consumer can simply read whenever woken. Notifications are a hint; polling stays the
   * caller's fallback. All subscriptions share the Notifications connection (the process's one
   * LISTEN connection when the ledger made this queue), closed when its last listener stops.
   * `wake` must not throw.
   */
  listen(queue: string, wake: () => void): { stop(): Promise<void> } {
    checkQueue(queue);
    // undefined: (re)connected, anything may have been missed.
    return this.notifications.listen(QUEUE_CHANNEL, (payload) => (payload === undefined || payload === queue ? wake() : undefined));
  }
}

function checkQueue(queue: string): void {
  if (typeof queue !== 'string' || !QueueName.is(queue)) throw new InvalidQueueNameError(queue);
}

function checkMsgId(msgId: string): void {
  if (typeof msgId !== 'string' || !MSG_ID.test(msgId)) {
    throw new RangeError(`msgId must be a message id (a decimal bigint string), got ${JSON.stringify(msgId)}`);
  }
}

function checkMs(what: string, ms: number): number {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw new RangeError(`${what} must be a finite number of milliseconds >= 0, got ${ms}`);
  }
  return ms;
}

function toMessage<T>(row: MessageRow): QueueMessage<T> {
  return {
    msgId: row.msg_id,
    readCt: row.read_ct,
    enqueuedAt: row.enqueued_at,
    vt: row.vt,
    message: row.message as T,
  };
}

// --- SQL -----------------------------------------------------------------------------------
// $1 is always the queue name. Durations arrive as milliseconds ($n::float8 * 1 ms).
// "Now" is statement_timestamp(): stable within the statement, so `vt <= statement_timestamp()`
// is an index condition (clock_timestamp() is volatile and would turn it into a per-row filter).

const MS = `* interval '1 millisecond'`;
const MESSAGE_COLUMNS = `msg_id::text AS msg_id, read_ct, enqueued_at, vt, message`;

// Inserts only when the snapshot has no such queue. The NOT EXISTS is not redundant with ON
// CONFLICT: the conflict check WAITS for any open transaction that has updated the existing row
// (a sender holding it, see SEND_SQL) until that transaction ends. It still waits for a
// concurrent transaction that is creating the same queue, to learn whether it commits.
const CREATE_SQL = `
INSERT INTO queues (name) SELECT $1 WHERE NOT EXISTS (SELECT FROM queues WHERE name = $1)
ON CONFLICT (name) DO NOTHING`;

// Send: the messages are the rows (queue, message, ord) of `source`, visible `delay` after the
// statement; sendBatch's source is its JSON array, the dispatcher's a SELECT over jl_jobs.
//
// This MUST stay one statement: the messages, the queue rows they reference and the counts must
// commit together (a caller's transaction may roll back any of it), and pg_notify must sit in
// the statement that inserts so it is queued only when the insert happened; PostgreSQL delivers
// it at commit (once per queue and transaction: it folds identical notifications), and drops it
// on rollback.
//
// The counts, without contention: a send typically runs inside the caller's transaction (the
// key writer's flush) and stays open until that commits. Had it updated the queue row, every
// other sender to the queue would wait for that commit: all flushes dispatching to one queue
// would run one after the other. So, per queue:
//   - `created`: a queue missing from the snapshot is inserted with its first count;
//   - `held`: an existing queue row is locked only if no other transaction holds it
//     (SKIP LOCKED, never a wait), and then takes this count plus every pending one (`folded`);
//   - otherwise the count goes to queue_send_counts (`pending`), for the next holder to fold.
// Senders above READ COMMITTED never lock the row (a row updated after their snapshot would make
// the lock fail with a serialization error); they always leave a pending count. Folding is
// exact: the holder deletes only rows its snapshot sees; one another holder deleted meanwhile
// (committed since) is skipped by the DELETE, and the UPDATE re-reads the row's newest total.
// Nothing else locks queue rows: the message tables have no foreign key to them (see 0002-queue).
// The one wait left is at creation: a send that creates a queue makes a concurrent send creating
// the same queue wait for its transaction to end; two transactions each creating two new queues
// in opposite orders can deadlock (PostgreSQL fails one). create() long-lived queues up front.
const sendSql = (source: string, delay: string) => `
WITH src AS MATERIALIZED (${source}),
per_queue AS (SELECT queue, count(*) AS n FROM src GROUP BY queue),
batch AS (SELECT statement_timestamp() AS at),
created AS (
  INSERT INTO queues (name, total_sent) SELECT queue, n FROM per_queue
  WHERE NOT EXISTS (SELECT FROM queues q WHERE q.name = per_queue.queue)  -- not redundant, see CREATE_SQL
  ON CONFLICT (name) DO NOTHING
  RETURNING name
),
held AS (
  SELECT name FROM queues
  WHERE name IN (SELECT queue FROM per_queue) AND current_setting('transaction_isolation') = 'read committed'
  FOR NO KEY UPDATE SKIP LOCKED
),
folded AS (
  DELETE FROM queue_send_counts WHERE queue IN (SELECT name FROM held)
  RETURNING queue, sent
),
counted AS (
  UPDATE queues q
  SET total_sent = total_sent + (SELECT n FROM per_queue p WHERE p.queue = q.name)
                 + (SELECT coalesce(sum(sent), 0) FROM folded f WHERE f.queue = q.name)
  WHERE name IN (SELECT name FROM held)
),
pending AS (
  INSERT INTO queue_send_counts (queue, sent)
  SELECT queue, n FROM per_queue
  WHERE queue NOT IN (SELECT name FROM created) AND queue NOT IN (SELECT name FROM held)
),
sent AS (
  INSERT INTO queue_messages (queue, enqueued_at, vt, message)
  SELECT src.queue, batch.at, batch.at + ${delay}, src.message
  FROM batch, src
  ORDER BY src.ord
  RETURNING msg_id
)
SELECT array(SELECT msg_id::text FROM sent ORDER BY msg_id) AS ids,
       (SELECT count(pg_notify('${QUEUE_CHANNEL}', queue)) FROM per_queue) AS notified`;

// sendBatch: $1 queue, $2 a JSON array of messages, $3 delay in ms.
const SEND_SQL = sendSql(`SELECT $1::text AS queue, m.message, m.ord FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS m (message, ord)`, `$3::float8 ${MS}`);

// The visible messages of the queue, oldest-visible first: vt order (then msg_id) is the order
// of the queue_messages_read index, so the scan starts at the first visible message and stops
// after qty. (Strict msg_id order would walk past every in-flight or delayed message with a
// lower id on each read, or sort all visible ones.) For messages sent without delay and not
// read yet, vt order is send order.
const VISIBLE = (limit: string) => `
  SELECT msg_id FROM queue_messages
  WHERE queue = $1 AND vt <= statement_timestamp()
  ORDER BY vt, msg_id
  LIMIT ${limit}
  FOR UPDATE SKIP LOCKED`;

// Read: $2 visibility timeout in ms, $3 qty.
//
// This MUST stay one statement: the row locks of FOR UPDATE SKIP LOCKED are what keep two
// readers off the same message, and they last only until the end of the transaction; a
// separate SELECT then UPDATE would release them in between (without a transaction) and two
// readers could take the same message. The `vt <= now` condition MUST stay in the locking
// subquery: a row another reader updated and committed after our snapshot is re-checked on its
// new version there (EvalPlanQual) and dropped, since its vt moved on. MATERIALIZED keeps the
// LIMIT and the locks to a single evaluation.
const READ_SQL = `
WITH picked AS MATERIALIZED (${VISIBLE('$3')}),
updated AS (
  UPDATE queue_messages m
  SET vt = statement_timestamp() + $2::float8 ${MS}, read_ct = m.read_ct + 1
  FROM picked WHERE m.msg_id = picked.msg_id
  RETURNING m.msg_id, m.read_ct, m.enqueued_at, m.vt, m.message
)
SELECT ${MESSAGE_COLUMNS} FROM updated ORDER BY msg_id`;

// The key writer's read of dispatch messages: as READ_SQL, but hidden for at least the job's lease
// (DispatchMessage.leaseMs), so the job started in the same transaction keeps its message hidden
// for as long as its lease lives without a second update. A message that is not one gets $2.
const READ_DISPATCH_SQL = READ_SQL.replace(
  `SET vt = statement_timestamp() + $2::float8 ${MS}`,
  `SET vt = statement_timestamp() + greatest($2::float8, CASE WHEN jsonb_typeof(m.message -> 'leaseMs') = 'number' THEN (m.message ->> 'leaseMs')::float8 ELSE 0 END) ${MS}`,
);

// Pop: the read's pick of one message, deleted instead of hidden. One statement, as read.
const POP_SQL = `
WITH picked AS MATERIALIZED (${VISIBLE('1')})
DELETE FROM queue_messages m USING picked WHERE m.msg_id = picked.msg_id
RETURNING m.msg_id::text AS msg_id, m.read_ct + 1 AS read_ct, m.enqueued_at, m.vt, m.message`;

// setVt: $2 msg_id, $3 timeout in ms. Waits for a reader that is locking the row (a few ms).
const SET_VT_SQL = `
UPDATE queue_messages SET vt = statement_timestamp() + $3::float8 ${MS}
WHERE queue = $1 AND msg_id = $2::bigint
RETURNING ${MESSAGE_COLUMNS}`;

// setVtMany and archiveMany lock their rows in msg_id order first: two batched statements over
// overlapping ids, each locking in its own scan order, could otherwise deadlock.
const LOCK_IN_ORDER = `
  SELECT msg_id FROM queue_messages
  WHERE queue = $1 AND msg_id = ANY ($2::bigint[])
  ORDER BY msg_id
  FOR UPDATE`;

// setVtMany: $2 msg_ids, $3 timeout in ms.
const SET_VT_MANY_SQL = `
WITH locked AS MATERIALIZED (${LOCK_IN_ORDER})
UPDATE queue_messages m SET vt = statement_timestamp() + $3::float8 ${MS}
FROM locked WHERE m.msg_id = locked.msg_id`;

// Archive: $2 msg_ids. Delete and insert MUST stay one statement, so the message is never in
// both tables or in neither. A second archive of the same message finds nothing to delete (if
// concurrent, it waits for the first, then finds the row gone) and returns no id.
const ARCHIVE_SQL = `
WITH locked AS MATERIALIZED (${LOCK_IN_ORDER}),
moved AS (
  DELETE FROM queue_messages m USING locked WHERE m.msg_id = locked.msg_id
  RETURNING m.msg_id, m.queue, m.read_ct, m.enqueued_at, m.vt, m.message
),
archived AS (
  INSERT INTO queue_archive (msg_id, queue, read_ct, enqueued_at, archived_at, vt, message)
  SELECT msg_id, queue, read_ct, enqueued_at, statement_timestamp(), vt, message FROM moved
  RETURNING msg_id
)
SELECT msg_id::text AS msg_id FROM archived ORDER BY msg_id`;

// A flush's messages by id alone (they span queues), locked in msg_id order first: two flushes
// touching overlapping sets cannot deadlock.
const LOCK_BY_ID = `SELECT msg_id FROM queue_messages WHERE msg_id = ANY ($1::bigint[]) ORDER BY msg_id FOR UPDATE`;

// The writer's archive of messages it cannot run (malformed, a stale lease's). One statement, as ARCHIVE_SQL.
const ARCHIVE_BY_ID_SQL = `
WITH locked AS MATERIALIZED (${LOCK_BY_ID}),
moved AS (
  DELETE FROM queue_messages m USING locked WHERE m.msg_id = locked.msg_id
  RETURNING m.msg_id, m.queue, m.read_ct, m.enqueued_at, m.vt, m.message
)
INSERT INTO queue_archive (msg_id, queue, read_ct, enqueued_at, archived_at, vt, message)
SELECT msg_id, queue, read_ct, enqueued_at, statement_timestamp(), vt, message FROM moved`;

// The dispatcher's delete of the messages its batch's releases name.
const DELETE_BY_ID_SQL = `
WITH locked AS MATERIALIZED (${LOCK_BY_ID})
DELETE FROM queue_messages m USING locked WHERE m.msg_id = locked.msg_id`;

// The dispatcher's visibility moves: $1 a JSON array of {msg_id, ms}; rows locked in msg_id order, as LOCK_IN_ORDER.
const SET_VISIBILITY_SQL = `
WITH x AS (SELECT * FROM jsonb_to_recordset($1::jsonb) AS x (msg_id bigint, ms float8)),
locked AS MATERIALIZED (SELECT m.msg_id FROM queue_messages m JOIN x ON x.msg_id = m.msg_id ORDER BY m.msg_id FOR UPDATE OF m)
UPDATE queue_messages m SET vt = statement_timestamp() + x.ms ${MS}
FROM x JOIN locked ON locked.msg_id = x.msg_id
WHERE m.msg_id = x.msg_id`;

/** The dispatcher's statements on the queue, run in the transaction that applies its batch. */
export const dispatchQueue: DispatchQueue = {
  send: (source: Statement) => ({ text: sendSql(source.text, `0 ${MS}`), values: source.values }),
  archive: (msgIds) => ({ text: ARCHIVE_BY_ID_SQL, values: [msgIds] }),
  remove: (msgIds) => ({ text: DELETE_BY_ID_SQL, values: [msgIds] }),
  setVisibility: (entries) => ({ text: SET_VISIBILITY_SQL, values: [JSON.stringify(entries.map((e) => ({ msg_id: e.msgId, ms: e.ms })))] }),
};

/** read() of dispatch messages as a statement, for the key writer's flush (see READ_DISPATCH_SQL). */
export const readStatement = (queue: string, vtMs: number, qty: number): Statement => {
  checkQueue(queue);
  checkMs('vtMs', vtMs);
  return { text: READ_DISPATCH_SQL, values: [queue, vtMs, qty] };
};

const DELETE_SQL = `DELETE FROM queue_messages WHERE queue = $1 AND msg_id = $2::bigint`;

// Purge waits for readers locking rows of the queue (each only for its statement).
const PURGE_SQL = `DELETE FROM queue_messages WHERE queue = $1`;

// One statement, one snapshot: the counts and the total agree with each other. Read-only (the
// pending counts are summed here, folded by senders). depth and oldest walk the queue's part of
// queue_messages_read, so they cost O(depth).
const METRICS_SQL = `
SELECT
  (SELECT count(*) FROM queue_messages WHERE queue = $1) AS depth,
  (SELECT count(*) FROM queue_messages WHERE queue = $1 AND vt <= statement_timestamp()) AS visible_now,
  (SELECT extract(epoch FROM statement_timestamp() - min(enqueued_at)) * 1000
     FROM queue_messages WHERE queue = $1)::float8 AS oldest_age_ms,
  coalesce((SELECT total_sent FROM queues WHERE name = $1), 0)
    + coalesce((SELECT sum(sent) FROM queue_send_counts WHERE queue = $1), 0) AS total_sent`;

import type pg from 'pg';
import { DuplicateEventIdError } from '../../../domain/ports/event-store.js';
import { StaleStateError, TransientWriteError } from '../../../domain/ports/ledger-store.js';
import type { Statement } from '../../../projections/projection.js';
import { isConnectionError } from '../../postgres/outage.js';

// What a failed statement of a write transaction means to the key writer (./write-transaction.ts).

export const isPgError = (error: unknown): error is pg.DatabaseError => error instanceof Error && 'code' in error && 'severity' in error;
export const isAbortedTransaction = (error: unknown): boolean => isPgError(error) && error.code === '25P02';

/** Labels a statement's error with the statement (its first words), for the log line that reports it. */
export const named = (reason: unknown, statement: Statement | undefined): unknown => {
  if (reason instanceof Error && statement !== undefined && !('query' in reason)) Object.assign(reason, { query: statement.text.replace(/\s+/g, ' ').trim().slice(0, 60) });
  return reason;
};

// An error on appends names the week's partition the row went to (migration 17): appends_w20261130, ...
// On a distributed ledger (Citus) a worker's error names its shard: appends_w20261130_102304,
// streams_pkey_102008: the shard's id is left out.
const unsharded = (name: string | undefined): string => (name ?? '').replace(/_\d{5,}$/, '');
const APPENDS_TABLE = /^appends(_w\d{8}|_before_w\d{8})?$/;
const APPENDS_PKEY = /^appends(_w\d{8}|_before_w\d{8})?_pkey$/;

/** An append whose week has no partition of appends yet (migration 17): make the weeks, then run it again. */
export const isMissingWeek = (error: unknown): boolean => isPgError(error) && error.code === '23514' && unsharded(error.table ?? 'appends') === 'appends' && /no partition of relation "appends/.test(error.message);

/** What a failed statement means to the writer: run again, a duplicate job id, or the error itself. */
export const mapError = (error: unknown): unknown => {
  if (!isPgError(error)) {
    // The connection went away (a restart, a network cut): nothing was committed, or the COMMIT's
    // answer was lost. Either way a new transaction re-reads the streams and decides again.
    return isConnectionError(error) ? new TransientWriteError((error as Error).message, { cause: error }) : error;
  }
  // deadlock_detected, serialization_failure, or a stream another transaction created first;
  // class 57P (the server shutting down or restarting: admin_shutdown, crash_shutdown,
  // cannot_connect_now) and class 08 (connection exceptions) end the session, not the flush.
  // A job stream another transaction created first fails on appends_pkey (WRITE_SQL: its creation is not locked).
  // A worker's error relayed by Citus carries neither its constraint nor its table and column:
  // only its message says them.
  const constraint = unsharded(error.constraint ?? /unique constraint "([^"]+)"/.exec(error.message)?.[1]);
  const table = unsharded(error.table ?? /of relation "([^"]+)"/.exec(error.message)?.[1]);
  const column = error.column ?? /null value in column "([^"]+)"/.exec(error.message)?.[1];
  if (error.code === '40P01' || error.code === '40001' || (error.code === '23505' && (constraint === 'streams_pkey' || APPENDS_PKEY.test(constraint)))) {
    return new TransientWriteError(error.message);
  }
  if (isConnectionError(error) || isMissingWeek(error)) return new TransientWriteError(error.message, { cause: error });
  // WRITE_SQL's expected-revision check: a stream that had moved on gets no claimed row (on a
  // distributed ledger, MOVE_STREAMS_SQL: its streams row no revision).
  if (error.code === '23502' && (APPENDS_TABLE.test(table) || table === 'streams') && column === 'revision') return new StaleStateError(error.message);
  // READ_CHECK_SQL: a stream a decision only read moved before the commit (DETAIL names them).
  if (error.code === 'JL001') return new StaleStateError(error.message, (error.detail ?? '').split(', ').filter((s) => s !== ''));
  if (error.code === '23505' && constraint === 'unique_event_ids_pkey') {
    const eventId = /\(event_id\)=\(([0-9a-f-]+)\)/i.exec(error.detail ?? '')?.[1];
    return new DuplicateEventIdError('', error.detail ?? '', eventId);
  }
  return error;
};


import { destination, pino } from 'pino';
import type { Logger } from '../../domain/ports/logger.js';

/** What a logged error keeps: enough to act on, never the objects it drags along. */
export interface SerializedError {
  readonly type: string;
  readonly message: string;
  /** PostgreSQL's SQLSTATE (e.g. 57P01) or Node's errno code (e.g. ECONNREFUSED). */
  readonly code?: string;
  /** The name of the statement that failed, when the code that ran it attached one. */
  readonly query?: string;
  /** For errors of our own code; a database's or a socket's stack says nothing new and each line repeats it. */
  readonly stack?: string;
  readonly cause?: SerializedError;
}

/** A database's or a socket's error, or one of ours that only wraps one (TransientWriteError). */
const isDatabaseOrSocketError = (error: Error & { code?: unknown; severity?: unknown; syscall?: unknown }, depth = 0): boolean =>
  error.severity !== undefined ||
  error.syscall !== undefined ||
  /Connection terminated|timeout exceeded when trying to connect/.test(error.message) ||
  (depth < 3 && error.cause instanceof Error && isDatabaseOrSocketError(error.cause, depth + 1));

/**
 * pino's default error serializer copies every enumerable property: pg's errors carry the client
 * (its config and every prepared statement's text), about 10 KB a line during an outage.
 */
export const serializeError = (value: unknown, depth = 0): SerializedError | unknown => {
  if (!(value instanceof Error)) return value;
  const error = value as Error & { code?: unknown; query?: unknown; cause?: unknown };
  const code = typeof error.code === 'string' ? error.code : undefined;
  const query = typeof error.query === 'string' ? error.query : undefined;
  const cause = depth < 3 && error.cause instanceof Error ? (serializeError(error.cause, depth + 1) as SerializedError) : undefined;
  return {
    type: error.name,
    message: error.message,
    ...(code ? { code } : {}),
    ...(query ? { query } : {}),
    ...(isDatabaseOrSocketError(error) || error.stack === undefined ? {} : { stack: error.stack }),
    ...(cause ? { cause } : {}),
  };
};

/** The process logger: JSON lines on stderr, level from LOG_LEVEL (default info). */
export const createLogger = (options: { level?: string; name?: string } = {}): Logger =>
  pino(
    { name: options.name ?? 'jobledger', level: options.level ?? process.env.LOG_LEVEL ?? 'info', serializers: { err: (e: unknown) => serializeError(e) } },
    destination(2),
  );

import { silentLogger, type Logger } from '../../domain/ports/logger.js';
import type { Ledger, LedgerOptions } from '../ledger.js';
import type { LedgerReader, LedgerReaderOptions } from '../ledger-reader.js';

// What every command gets. Light on purpose: each command file imports it at registration, and
// `--help` or `--version` must not load the ledger, PostgreSQL's driver or pino; those are
// imported here when a command first opens the database.

export interface CommandContext {
  readonly logger: Logger;
  /** Where progress and notes go (stderr), so stdout stays the command's output. */
  note(line: string): void;
  /** Run before a command's action (not for help or --version): loads what the logger needs. */
  prepare?(): Promise<void>;
}

/** The process's context: its logger (LOG_LEVEL, default warn) is pino, loaded by prepare(). */
export const createContext = (): CommandContext => {
  let logger: Logger = silentLogger;
  return {
    get logger() {
      return logger;
    },
    note: (line) => process.stderr.write(`${line}\n`),
    prepare: async () => {
      const { createLogger } = await import('../logging/logger.js');
      logger = createLogger({ level: process.env.LOG_LEVEL ?? 'warn' });
    },
  };
};

/**
 * Opens the database (DATABASE_URL or embedded) for one command, and closes it after. A database
 * that cannot be reached fails before `run`, in one line naming DATABASE_URL and what was tried.
 */
export const withDatabase = async <T>(ctx: CommandContext, run: (url: string) => Promise<T>): Promise<T> => {
  const { openDatabase, checkReachable } = await import('./database.js');
  const db = await openDatabase((line) => ctx.logger.debug({ embedded: line }));
  try {
    await checkReachable(db);
    return await run(db.url).catch((error: unknown) => {
      throw db.explain(error);
    });
  } finally {
    await db.close();
  }
};

/** Runs `run` on what `open` opened, and closes it after, whatever `run` did. */
const closing = async <R extends { close(): Promise<void> }, T>(opened: Promise<R>, run: (r: R) => Promise<T>): Promise<T> => {
  const r = await opened;
  try {
    return await run(r);
  } finally {
    await r.close();
  }
};

/** Opens the database (DATABASE_URL or embedded) and the ledger for one command, and closes both after it. */
export const withLedger = <T>(ctx: CommandContext, run: (ledger: Ledger) => Promise<T>, options: Partial<LedgerOptions> = {}): Promise<T> =>
  withDatabase(ctx, async (url) => {
    const { createLedger } = await import('../ledger.js');
    return closing(createLedger({ databaseUrl: url, logger: ctx.logger, poolSize: 4, ...options }), run);
  });

/**
 * As withLedger, for a command that only reads: the ledger's read side (LedgerReader), which
 * records nothing on open, on a pool of `poolSize` connections.
 */
export const withReader = <T>(ctx: CommandContext, run: (reader: LedgerReader) => Promise<T>, options: Partial<LedgerReaderOptions> = {}): Promise<T> =>
  withDatabase(ctx, async (url) => {
    const { LedgerReader } = await import('../ledger-reader.js');
    return closing(LedgerReader.open({ databaseUrl: url, logger: ctx.logger, poolSize: 1, ...options }), run);
  });

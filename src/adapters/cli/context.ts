import type { Logger } from '../../domain/ports/logger.js';
import type { Pool } from 'pg';
import type { Ledger, LedgerOptions } from '../ledger.js';
import type { LedgerReader, LedgerReaderOptions } from '../ledger-reader.js';

// What every command gets. Light on purpose: each command file imports it at registration, and
// `--help` or `--version` must not load the ledger, PostgreSQL's driver or pino; those are
// imported here when a command first opens the database, and pino when a line is first logged.

export interface CommandContext {
  readonly logger: Logger;
  /** Where progress and notes go (stderr), so stdout stays the command's output. */
  note(line: string): void;
  /** Run before a command's action (not for help or --version): checks LOG_LEVEL. */
  prepare?(): Promise<void>;
  /** Resolves once every line logged so far is written (main.ts waits for it before the process exits). */
  settle?(): Promise<void>;
}

/** pino's levels, least severe first ('silent' logs nothing). */
const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal'];

type Method = Exclude<keyof Logger, 'child'>;

/**
 * The process's context. Its logger (LOG_LEVEL, default warn) is pino, loaded when a line at that
 * level or above is first logged: most command lines log none, and loading pino cost ~12 ms of
 * each. Lines logged while it loads wait for it, in order; settle() waits for them.
 */
export const createContext = (): CommandContext => {
  const level = process.env.LOG_LEVEL ?? 'warn';
  const enabled = (method: Method): boolean => LEVELS.includes(level) && LEVELS.indexOf(method) >= LEVELS.indexOf(level);
  let pino: Logger | undefined;
  let loading: Promise<void> | undefined;
  const waiting: (() => void)[] = [];
  const deferred = (bindings: readonly Record<string, unknown>[]): Logger => {
    let resolved: Logger | undefined;
    const target = (): Logger => (resolved ??= bindings.reduce<Logger>((l, b) => l.child(b), pino!));
    const log =
      (method: Method) =>
      (...args: unknown[]): void => {
        if (!enabled(method)) return;
        const write = () => (target()[method] as (...a: unknown[]) => void)(...args);
        if (pino !== undefined) return write();
        waiting.push(write);
        loading ??= import('../logging/logger.js').then(({ createLogger }) => {
          pino = createLogger({ level });
          for (const w of waiting.splice(0)) w();
        });
      };
    return { child: (b) => deferred([...bindings, b]), error: log('error'), warn: log('warn'), info: log('info'), debug: log('debug'), trace: log('trace') };
  };
  return {
    logger: deferred([]),
    note: (line) => process.stderr.write(`${line}\n`),
    prepare: async () => {
      if (level !== 'silent' && !LEVELS.includes(level)) throw new Error(`LOG_LEVEL: unknown level ${JSON.stringify(level)} (one of ${[...LEVELS, 'silent'].join(', ')})`);
    },
    settle: () => loading ?? Promise.resolve(),
  };
};

/**
 * Opens the database (DATABASE_URL or embedded) and a pool on it for one command, loads the
 * command's module (`load`) meanwhile, and closes both after. A database that cannot be reached
 * fails before `run`, in one line naming DATABASE_URL and what was tried.
 *
 * The reachability check is the pool's first connection, given back to it: the command's first
 * statement runs on it (a check on a connection of its own cost its setup and its teardown, some
 * 20 ms of each command line); the module loads while the server starts its session. The pool is
 * ended without waiting for the server to close its sessions: each is told to end (Terminate) as
 * end() is called, after the command's last statement has answered, and main.ts exits the process
 * once the output is flushed.
 */
const withDatabase = async <M, T>(ctx: CommandContext, load: () => Promise<M>, run: (db: { readonly url: string; readonly pool: Pool }, module: M) => Promise<T>, poolSize: number): Promise<T> => {
  const [{ openDatabase, checkReachable }, { createPool }] = await Promise.all([import('./database.js'), import('../ledger-reader.js')]);
  const db = await openDatabase((line) => ctx.logger.debug({ embedded: line }));
  try {
    const pool = createPool({ databaseUrl: db.url, logger: ctx.logger, poolSize });
    try {
      const [, module] = await Promise.all([checkReachable(db, pool), load()]);
      return await run({ url: db.url, pool }, module).catch((error: unknown) => {
        throw db.explain(error);
      });
    } finally {
      pool.end().catch(() => undefined);
    }
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
  withDatabase(
    ctx,
    () => import('../ledger.js'),
    ({ url, pool }, { createLedger }) => closing(createLedger({ databaseUrl: url, pool, logger: ctx.logger, ...options }), run),
    options.poolSize ?? 4,
  );

/**
 * As withLedger, for a command that reads the ledger itself and writes nothing (explain, job,
 * audit, state): one connection, its reads queued on it (a second connection's setup costs more
 * than the wait), and no partitions made for the weeks to come (a write's business).
 */
export const withLedgerToRead = <T>(ctx: CommandContext, run: (ledger: Ledger) => Promise<T>): Promise<T> => withLedger(ctx, run, { poolSize: 1, makeWeeks: false });

/**
 * As withLedger, for a command that only reads: the ledger's read side (LedgerReader), which
 * records nothing on open, on a pool of `poolSize` connections.
 */
export const withReader = <T>(ctx: CommandContext, run: (reader: LedgerReader) => Promise<T>, options: Partial<LedgerReaderOptions> = {}): Promise<T> =>
  withDatabase(
    ctx,
    () => import('../ledger-reader.js'),
    ({ url, pool }, { LedgerReader }) => closing(LedgerReader.open({ databaseUrl: url, pool, logger: ctx.logger, ...options }), run),
    options.poolSize ?? 1,
  );

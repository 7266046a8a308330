import type { Logger } from '../../domain/ports/logger.js';
import { createLedger, type Ledger, type LedgerOptions } from '../ledger.js';
import { createLogger } from '../logging/logger.js';
import { openDatabase } from './database.js';

export interface CommandContext {
  readonly logger: Logger;
  /** Where progress and notes go (stderr), so stdout stays the command's output. */
  note(line: string): void;
}

export const createContext = (): CommandContext => {
  const logger = createLogger({ level: process.env.LOG_LEVEL ?? 'warn' });
  return { logger, note: (line) => process.stderr.write(`${line}\n`) };
};

/** Opens the database (DATABASE_URL or embedded) for one command, and closes it after. */
export const withDatabase = async <T>(ctx: CommandContext, run: (url: string) => Promise<T>): Promise<T> => {
  const db = await openDatabase((line) => ctx.logger.debug({ embedded: line }));
  try {
    return await run(db.url);
  } finally {
    await db.close();
  }
};

/** Opens the database (DATABASE_URL or embedded) and the ledger for one command, and closes both after it. */
export const withLedger = <T>(ctx: CommandContext, run: (ledger: Ledger) => Promise<T>, options: Partial<LedgerOptions> = {}): Promise<T> =>
  withDatabase(ctx, async (url) => {
    const ledger = await createLedger({ databaseUrl: url, logger: ctx.logger, poolSize: 4, ...options });
    try {
      return await run(ledger);
    } finally {
      await ledger.close();
    }
  });

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

/** Opens the database (DATABASE_URL or embedded) and the ledger for one command, and closes both after it. */
export const withLedger = async <T>(ctx: CommandContext, run: (ledger: Ledger) => Promise<T>, options: Partial<LedgerOptions> = {}): Promise<T> => {
  const db = await openDatabase((line) => ctx.logger.debug({ embedded: line }));
  try {
    const ledger = await createLedger({ databaseUrl: db.url, logger: ctx.logger, poolSize: 4, ...options });
    try {
      return await run(ledger);
    } finally {
      await ledger.close();
    }
  } finally {
    await db.close();
  }
};

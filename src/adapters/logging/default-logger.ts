import type { Logger } from '../../domain/ports/logger.js';

/**
 * The logger of a ledger opened without one: pino at LOG_LEVEL (default info), imported when asked
 * for, so that a process passing its own logger never loads pino (the CLI's loads it when it first
 * logs a line: most command lines log none, and loading it cost ~12 ms of each).
 */
export const defaultLogger = async (): Promise<Logger> => (await import('./logger.js')).createLogger();

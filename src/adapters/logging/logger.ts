import { destination, pino } from 'pino';
import type { Logger } from '../../domain/ports/logger.js';

/** The process logger: JSON lines on stderr, level from LOG_LEVEL (default info). */
export const createLogger = (options: { level?: string; name?: string } = {}): Logger =>
  pino({ name: options.name ?? 'jobledger', level: options.level ?? process.env.LOG_LEVEL ?? 'info' }, destination(2));

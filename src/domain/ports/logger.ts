// The logging port: the subset of pino's Logger the application layers use, so they log
// structured fields (key, jobId, leaseId) without depending on pino.
export interface LogFn {
  (fields: object, message?: string): void;
  (message: string): void;
}

export interface Logger {
  child(bindings: Record<string, unknown>): Logger;
  error: LogFn;
  warn: LogFn;
  info: LogFn;
  debug: LogFn;
  trace: LogFn;
}

const noop: LogFn = () => undefined;

export const silentLogger: Logger = {
  child: () => silentLogger,
  error: noop,
  warn: noop,
  info: noop,
  debug: noop,
  trace: noop,
};

import type { ChildProcess } from 'node:child_process';

// What every part of the embedded server shares: the caller's options, the run's context (its
// notes and the server's last output lines, for error messages) and a server that is up.

export interface EmbeddedPostgresOptions {
  /** Data directory (made absolute). */
  dataDir: string;
  /** true: keep the cluster across runs and reuse it; false: fresh cluster, removed on stop. */
  persistent: boolean;
  /** TCP port; default: the port remembered for a persistent dir if free, else one the OS picks. */
  port?: number;
  /** Progress notes of this module, and the server's own output prefixed with `postgres: `. */
  log?: (line: string) => void;
  /** Extra `postgres` arguments, e.g. `['-c', 'fsync=off']`; they come after (and override) ours. */
  postgresFlags?: string[];
  /** Extra `initdb` arguments (default `['--encoding=UTF8']`), e.g. `--no-sync` for tests. */
  initdbFlags?: string[];
  /** Password of user `postgres`; default: random, remembered beside a persistent data dir. */
  password?: string;
  /** How long to wait for the server to accept connections (default 60 s). */
  startTimeoutMs?: number;
}

export const USER = 'postgres';

export const DEFAULT_START_TIMEOUT_MS = 60_000;

export const STOP_TIMEOUT_MS = 20_000;

export interface Context {
  readonly dataDir: string;
  readonly options: EmbeddedPostgresOptions;
  note(line: string): void;
  /** Last lines of initdb/postgres output, for error messages. */
  readonly output: string[];
}

/** A server up on the data dir; `proc` when this process started it. */
export interface Running {
  readonly url: string;
  readonly port: number;
  readonly pid: number;
  readonly proc?: ChildProcess;
}

export const makeUrl = (password: string, port: number): string =>
  `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;

export function outputSink(ctx: Context, source: string): (message: unknown) => void {
  return (message) => {
    const text = message instanceof Error ? message.message : String(message);
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      ctx.output.push(line);
      if (ctx.output.length > LOG_TAIL_LINES) ctx.output.shift();
      ctx.options.log?.(`${source}: ${line}`);
    }
  };
}

export function failure(ctx: Context, what: string, cause: unknown): Error {
  const tail = ctx.output.slice(-15);
  const reason = cause === undefined ? '' : `: ${firstLine(cause)}`;
  return new Error(
    `embedded PostgreSQL: ${what}${reason}` + (tail.length ? `\n--- last server output ---\n${tail.join('\n')}` : ''),
    { cause },
  );
}

export function firstLine(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.split('\n')[0]?.trim() || 'unknown error';
}

const LOG_TAIL_LINES = 40;

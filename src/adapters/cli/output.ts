import { createRequire } from 'node:module';
import type TableType from 'cli-table3';

// cli-table3 is required when a table is drawn, not when a command registers: commands that
// print none (and --help) do not load it. The CLI's bundle leaves this require alone, so there too
// it is loaded from node_modules, when a table is drawn.
const require = createRequire(import.meta.url);

export interface Output {
  readonly json: boolean;
}

/** Prints a value as JSON (--json) or as the human form `human` renders. */
export const print = (out: Output, value: unknown, human: () => string): void => {
  process.stdout.write(out.json ? `${JSON.stringify(value, null, 2)}\n` : `${human()}\n`);
};

export const table = (head: readonly string[], rows: readonly (readonly unknown[])[]): string => {
  const Table = require('cli-table3') as typeof TableType;
  const t = new Table({ head: [...head], style: { head: [], border: [], compact: true } });
  for (const row of rows) t.push(row.map((cell) => (cell === null || cell === undefined ? '' : String(cell))));
  return t.toString();
};

export const time = (epochMs: number | null | undefined): string => (epochMs == null ? '' : new Date(epochMs).toISOString());

/**
 * `text` on one line: control characters (a newline in a key, a NUL) as JSON escapes, so an error
 * message quoting what the user typed stays one line.
 */
export const oneLine = (text: string): string => text.replace(/[\u0000-\u001f\u007f]/g, (c) => JSON.stringify(c).slice(1, -1));

/**
 * `text` for a table cell of at most `width` characters: its first line (an error's message, not
 * its stack), whitespace runs as one space, cut with "…" when longer; one line, as oneLine makes it.
 */
export const shortened = (text: string | null, width: number): string | null => {
  if (text === null) return null;
  const first = text.trim().split(/\r?\n/, 1)[0]!.replace(/\s+/g, ' ');
  const line = oneLine(first);
  return line.length <= width ? line : `${line.slice(0, width - 1)}…`;
};

import { createRequire } from 'node:module';
import type StringWidth from 'string-width';

// string-width is required when a table is drawn, not when a command registers: commands that
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

/**
 * A table cell's lines: null and undefined empty; a newline starts a line; any other control
 * character as its JSON escape (oneLine), so that a key or a job id holding ESC or a tab neither
 * drives the terminal nor breaks the columns.
 */
export const cellLines = (cell: unknown): string[] => (cell === null || cell === undefined ? '' : String(cell)).split('\n').map(oneLine);

/**
 * `rows` under `head` in a grid ruled with box-drawing characters, the header ruled off, a row a
 * line (a cell's own lines stacked, the row as high as its highest cell), each column as wide as
 * its widest line on a terminal (string-width: a CJK character or an emoji takes two), cells left
 * aligned with a space either side (cellLines); no rows, no rule under the header. This is cli-table3's
 * compact style, which the CLI drew with it before, character for character
 * (test/cli/table.unit.test.ts compares the two on generated cells): drawn here because
 * cli-table3 merges its options into every cell and lays out spans the CLI never uses, 55 ms for
 * 50 rows of 10 columns in a command line's cold process, against ~3 ms here (and ~4 to load
 * string-width). Every row has head.length cells.
 */
export const table = (head: readonly string[], rows: readonly (readonly unknown[])[]): string => {
  const width = require('string-width') as typeof StringWidth;
  const grid = [head, ...rows].map((row) => row.map(cellLines));
  const widths = head.map((_, c) => Math.max(...grid.map((row) => Math.max(...row[c]!.map(width)))));
  const rule = (left: string, middle: string, right: string) => left + widths.map((w) => '─'.repeat(w + 2)).join(middle) + right;
  const lines = (row: string[][]) =>
    Array.from({ length: Math.max(...row.map((cell) => cell.length)) }, (_, i) => `│${row.map((cell, c) => ` ${cell[i] ?? ''}${' '.repeat(widths[c]! - width(cell[i] ?? ''))} `).join('│')}│`);
  const body = grid.slice(1).flatMap(lines);
  return [rule('┌', '┬', '┐'), ...lines(grid[0]!), ...(body.length === 0 ? [] : [rule('├', '┼', '┤'), ...body]), rule('└', '┴', '┘')].join('\n');
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

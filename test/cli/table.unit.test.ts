import { createRequire } from 'node:module';
import type TableType from 'cli-table3';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { cellLines, table } from '../../src/adapters/cli/output.js';

// The CLI's tables were drawn by cli-table3 (compact style) until it was found to take 55 ms of a
// cold command line for 50 rows; output.ts draws them itself now. What a user reads, or a script
// of theirs parses, must not change: the same cells give the same characters as cli-table3 gave,
// wide characters, emoji, combining marks and newlines inside a cell included. One change, on
// purpose: a control character other than a newline is shown escaped (cellLines), where
// cli-table3 passed it to the terminal (ESC) or let it break the columns (a tab); so the cells are
// given to cli-table3 escaped. cli-table3 stays a devDependency for this comparison alone.

const Table = createRequire(import.meta.url)('cli-table3') as typeof TableType;

/** What the CLI printed before (output.ts's table() as it was, with cli-table3), of the cells escaped. */
const asCliTable3Drew = (head: readonly string[], rows: readonly (readonly unknown[])[]): string => {
  const escaped = (cell: unknown) => cellLines(cell).join('\n');
  const t = new Table({ head: head.map(escaped), style: { head: [], border: [], compact: true } });
  for (const row of rows) t.push(row.map(escaped));
  return t.toString();
};

const text = fc.string({
  unit: fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom('a', 'Z', '0', ' ', '-', '…', '│', '─') },
    { weight: 2, arbitrary: fc.constantFrom('漢', '字', 'ｶ', '한', '😀', '👩‍💻', 'é', 'e\u0301', '\u200b') },
    { weight: 1, arbitrary: fc.constantFrom('\n', '\t', '\u0000', '\u001b[31m', '\u001b[0m', '\r') },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 1 }) },
  ),
  maxLength: 14,
});
const cell = fc.oneof({ weight: 8, arbitrary: text }, { weight: 1, arbitrary: fc.integer() }, { weight: 1, arbitrary: fc.constantFrom(null, undefined) });

describe('table', () => {
  it('draws what cli-table3 drew, character for character', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 6 }).chain((columns) =>
          fc.tuple(fc.array(text, { minLength: columns, maxLength: columns }), fc.array(fc.array(cell, { minLength: columns, maxLength: columns }), { maxLength: 6 })),
        ),
        ([head, rows]) => {
          expect(table(head, rows)).toBe(asCliTable3Drew(head, rows));
        },
      ),
      { numRuns: 500, seed: 20261205 },
    );
  });

  it('shows a control character in a cell escaped, a newline as a second line', () => {
    expect(table(['job'], [['\u001b[2Jx\ty\nz']])).toBe(['┌───────────────┐', '│ job           │', '├───────────────┤', '│ \\u001b[2Jx\\ty │', '│ z             │', '└───────────────┘'].join('\n'));
  });

  it('a header and two rows, one of two lines', () => {
    expect(table(['key', 'in use'], [['a', 1], ['漢字\nb', null]])).toBe(
      ['┌──────┬────────┐', '│ key  │ in use │', '├──────┼────────┤', '│ a    │ 1      │', '│ 漢字 │        │', '│ b    │        │', '└──────┴────────┘'].join('\n'),
    );
  });
});

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cliProgram, renderCliReference } from '../../scripts/cli-reference.js';

// docs/cli.md is generated from the commands' definitions: a flag or a description changed in
// src/adapters/cli/commands without running `npm run docs:cli` leaves the reference wrong.

const COMMITTED = new URL('../../docs/cli.md', import.meta.url);

describe('docs/cli.md', () => {
  it('is what `npm run docs:cli` writes from the CLI as it is', async () => {
    const fresh = await renderCliReference();
    // One message, not a diff of the whole file: the fix is the same whatever changed.
    expect(readFileSync(COMMITTED, 'utf8') === fresh, 'docs/cli.md is out of date: run npm run docs:cli').toBe(true);
  });

  it('has a section with the usage and every option of each command', async () => {
    const text = readFileSync(COMMITTED, 'utf8');
    const program = await cliProgram();
    expect(program.commands.length).toBeGreaterThan(15);
    for (const command of program.commands) {
      const section = text.split(`\n## ${command.name()}\n`)[1]?.split('\n## ')[0];
      expect(section, `a section "## ${command.name()}"`).toBeDefined();
      expect(section).toContain(`Usage: jobledger ${command.name()} `);
      for (const option of command.options) expect(section, `${command.name()} ${option.long}`).toContain(option.flags);
    }
    expect(text).toMatch(/\| 2 \| input the CLI or the ledger cannot act on/);
  });
});

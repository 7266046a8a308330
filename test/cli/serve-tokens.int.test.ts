import { afterEach, describe, expect, it } from 'vitest';
import { runCliInProcess } from './in-process.js';

// `jobledger serve` and its token variables: shown in --help; a bad setting stops it at once, in
// one line naming the variable, before any database is opened (exit 2).

const VARIABLES = ['JOBLEDGER_TOKEN', 'JOBLEDGER_TOKENS', 'JOBLEDGER_TOKENS_FILE'] as const;
const saved = Object.fromEntries(VARIABLES.map((v) => [v, process.env[v]]));

afterEach(() => {
  for (const v of VARIABLES) {
    if (saved[v] === undefined) delete process.env[v];
    else process.env[v] = saved[v];
  }
});

// Never reached: a bad token setting fails before the database is opened.
const NO_DATABASE = 'postgres://nobody@127.0.0.1:1/none';

describe('jobledger serve: token variables', () => {
  it('--help shows every token variable', async () => {
    const { code, stdout } = await runCliInProcess(NO_DATABASE, ['serve', '--help']);
    expect(code).toBe(0);
    for (const v of VARIABLES) expect(stdout).toContain(`${v}=`);
  });

  it.each([
    [{ JOBLEDGER_TOKENS: 'alice:a,:b' }, 'error: JOBLEDGER_TOKENS: entry 2 has an empty name'],
    [{ JOBLEDGER_TOKENS: 'alice:same,bob:same' }, 'error: JOBLEDGER_TOKENS: entry 2 (bob) has the same token as alice'],
    [{ JOBLEDGER_TOKENS_FILE: '/nonexistent/jobledger-tokens' }, 'error: JOBLEDGER_TOKENS_FILE: cannot read "/nonexistent/jobledger-tokens"'],
  ])('%j stops it with one line naming the variable, exit 2', async (env, line) => {
    Object.assign(process.env, env);
    const { code, stdout, stderr } = await runCliInProcess(NO_DATABASE, ['serve', '--port', '0']);
    expect(code).toBe(2);
    expect(stdout).toBe('');
    expect(stderr.startsWith(line)).toBe(true);
    expect(stderr.trimEnd().split('\n')).toHaveLength(1);
  });
});

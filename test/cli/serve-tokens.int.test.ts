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

  it.each([[['--host', '0.0.0.0']], [['--host', '192.0.2.2', '--public-reads']], [['--host', '::', '--allowed-host', 'jobs.example.com']]])(
    'regression (issue 21: off loopback reads were open): %j with no token set refuses to start, exit 2, saying what to set and what --public-reads does',
    async (flags) => {
      for (const v of VARIABLES) delete process.env[v];
      const { code, stdout, stderr } = await runCliInProcess(NO_DATABASE, ['serve', '--port', '0', ...flags]);
      expect(code).toBe(2);
      expect(stdout).toBe('');
      expect(stderr).toMatch(/^error: --host: \S+ is not a loopback address; set JOBLEDGER_TOKEN \(or JOBLEDGER_TOKENS \/ JOBLEDGER_TOKENS_FILE\) to serve on it: .*reads too, unless you also pass --public-reads\n$/);
    },
  );

  it.each([
    [['--host', 'a/b'], '--host: "a/b" is not a host name or an IP address'],
    [['--host', '10.0.0.1:7070'], '--host: "10.0.0.1:7070" is not a host name or an IP address'],
    [['--allowed-host', 'http://jobs.example.com'], '--allowed-host: "http://jobs.example.com" is not a host name or an IP address'],
    [['--allowed-host', ''], '--allowed-host: "" is not a host name or an IP address'],
  ])('%j is refused at once naming the flag, exit 2', async (flags, line) => {
    process.env.JOBLEDGER_TOKEN = 't';
    const { code, stderr } = await runCliInProcess(NO_DATABASE, ['serve', '--port', '0', ...flags]);
    expect(code).toBe(2);
    expect(stderr.startsWith(`error: ${line}`)).toBe(true);
  });
});

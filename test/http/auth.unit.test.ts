import type { FastifyReply, FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { isLoopback, operatorName, requireLoopbackHost, requireToken, resolveTokens } from '../../src/adapters/http/auth.js';
import { ValidationError } from '../../src/domain/values.js';

describe('isLoopback', () => {
  it.each(['127.0.0.1', '127.1.2.3', 'localhost', 'LOCALHOST', '::1', '[::1]', '::ffff:127.0.0.1'])('%s is loopback', (host) => {
    expect(isLoopback(host)).toBe(true);
  });
  it.each(['0.0.0.0', '::', '10.0.0.1', '192.168.1.10', '128.0.0.1', 'example.org', 'localhost.example.org', '::ffff:10.0.0.1', ''])('%s is not', (host) => {
    expect(isLoopback(host)).toBe(false);
  });
});

describe('resolveTokens', () => {
  const unread = (path: string): string => {
    throw new Error(`ENOENT: no such file or directory, open '${path}'`);
  };
  const file = (text: string) => (path: string) => (path === '/etc/jobledger/tokens' ? text : unread(path));

  it('uses JOBLEDGER_TOKEN when set, naming nobody', () => {
    expect(resolveTokens({ JOBLEDGER_TOKEN: 's3cret' })).toEqual({ tokens: [{ token: 's3cret', name: null }], generated: false });
  });
  it('generates a fresh unguessable one when nothing is set (or set empty)', () => {
    const a = resolveTokens({});
    const b = resolveTokens({ JOBLEDGER_TOKEN: '', JOBLEDGER_TOKENS: '' });
    expect(a.generated && b.generated).toBe(true);
    expect(a.tokens[0]).toEqual({ token: expect.stringMatching(/^[A-Za-z0-9_-]{32}$/), name: null });
    expect(a.tokens[0]!.token).not.toBe(b.tokens[0]!.token);
  });
  it('reads named tokens from JOBLEDGER_TOKENS (a token may hold ":"), beside the shared one', () => {
    expect(resolveTokens({ JOBLEDGER_TOKENS: 'alice:a-token, bob:b:token', JOBLEDGER_TOKEN: 'shared' })).toEqual({
      tokens: [
        { name: 'alice', token: 'a-token' },
        { name: 'bob', token: 'b:token' },
        { name: null, token: 'shared' },
      ],
      generated: false,
    });
  });
  it('reads named tokens from JOBLEDGER_TOKENS_FILE, one a line, skipping blank lines and # comments; one operator may have two (rotation)', () => {
    const text = '# operators\nalice:a1\n\n  # bob rotates\nbob:b1\r\nbob:b2\n';
    expect(resolveTokens({ JOBLEDGER_TOKENS_FILE: '/etc/jobledger/tokens' }, file(text)).tokens).toEqual([
      { name: 'alice', token: 'a1' },
      { name: 'bob', token: 'b1' },
      { name: 'bob', token: 'b2' },
    ]);
  });
  it.each([
    [{ JOBLEDGER_TOKENS: 'alice:a,:b' }, 'JOBLEDGER_TOKENS', 'entry 2 has an empty name'],
    [{ JOBLEDGER_TOKENS: 'alice:a,bob:' }, 'JOBLEDGER_TOKENS', 'entry 2 (bob) has an empty token'],
    [{ JOBLEDGER_TOKENS: 'alice' }, 'JOBLEDGER_TOKENS', 'entry 1 is not name:token'],
    [{ JOBLEDGER_TOKENS: 'alice:same,bob:same' }, 'JOBLEDGER_TOKENS', 'entry 2 (bob) has the same token as alice'],
    [{ JOBLEDGER_TOKENS: 'al ice:a' }, 'JOBLEDGER_TOKENS', 'without spaces'],
    [{ JOBLEDGER_TOKENS: ',' }, 'JOBLEDGER_TOKENS', 'entry 1 is not name:token'],
    [{ JOBLEDGER_TOKENS: 'alice:a', JOBLEDGER_TOKEN: 'a' }, 'JOBLEDGER_TOKEN', "is also alice's named token"],
    [{ JOBLEDGER_TOKENS: 'alice:a', JOBLEDGER_TOKENS_FILE: '/etc/jobledger/tokens' }, 'JOBLEDGER_TOKENS_FILE', 'not both'],
    [{ JOBLEDGER_TOKENS_FILE: '/nowhere' }, 'JOBLEDGER_TOKENS_FILE', 'cannot read "/nowhere": ENOENT'],
    [{ JOBLEDGER_TOKENS_FILE: '/etc/jobledger/tokens', text: '# nobody yet\n' }, 'JOBLEDGER_TOKENS_FILE', 'names no token'],
    [{ JOBLEDGER_TOKENS_FILE: '/etc/jobledger/tokens', text: 'alice:a\n:b\n' }, 'JOBLEDGER_TOKENS_FILE', 'line 2 has an empty name'],
  ])('bad configuration %j is refused naming %s', (env, variable, problem) => {
    const { text = '', ...vars } = env as Record<string, string>;
    let thrown: unknown;
    try {
      resolveTokens(vars, file(text));
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ValidationError);
    expect(thrown).toMatchObject({ field: variable, message: expect.stringContaining(problem) });
    // The error never shows a token.
    expect((thrown as Error).message).not.toMatch(/same,|:a\b/);
  });
});

describe('requireToken', () => {
  const call = async (method: string, authorization?: string) => {
    const sent: { code?: number; body?: unknown } = {};
    const reply = {
      code(c: number) {
        sent.code = c;
        return this;
      },
      header() {
        return this;
      },
      async send(body: unknown) {
        sent.body = body;
        return this;
      },
    } as unknown as FastifyReply;
    const request = { method, headers: authorization === undefined ? {} : { authorization } } as FastifyRequest;
    await requireToken([
      { token: 'right', name: null },
      { token: 'alices', name: 'alice' },
    ])(request, reply);
    return { code: sent.code, operator: operatorName(request) };
  };

  it('lets reads through and the right bearer tokens; refuses the rest with 401', async () => {
    const code = async (method: string, authorization?: string) => (await call(method, authorization)).code;
    expect(await code('GET')).toBeUndefined();
    expect(await code('HEAD')).toBeUndefined();
    expect(await code('POST', 'Bearer right')).toBeUndefined();
    expect(await code('POST', 'Bearer alices')).toBeUndefined();
    expect(await code('POST')).toBe(401);
    expect(await code('POST', 'Bearer wrong')).toBe(401);
    expect(await code('POST', 'Bearer righ')).toBe(401);
    expect(await code('POST', 'Bearer alice')).toBe(401);
    expect(await code('POST', 'right')).toBe(401);
    expect(await code('POST', 'Basic right')).toBe(401);
    expect(await code('DELETE', 'Bearer nope')).toBe(401);
  });

  it("remembers the operator of a named token for the request; the shared token names nobody", async () => {
    expect(await call('POST', 'Bearer alices')).toEqual({ code: undefined, operator: 'alice' });
    expect(await call('POST', 'Bearer right')).toEqual({ code: undefined, operator: null });
  });
});

describe('requireLoopbackHost', () => {
  const call = async (host: string | undefined) => {
    let code: number | undefined;
    const reply = {
      code(c: number) {
        code = c;
        return this;
      },
      async send() {
        return this;
      },
    } as unknown as FastifyReply;
    await requireLoopbackHost({ headers: host === undefined ? {} : { host } } as FastifyRequest, reply);
    return code;
  };

  it('passes loopback names with or without a port; refuses any other name, or none', async () => {
    for (const host of ['127.0.0.1:7070', 'localhost', 'localhost:1', '[::1]:7070', '127.9.9.9']) expect(await call(host)).toBeUndefined();
    for (const host of ['attacker.example', 'attacker.example:7070', '10.0.0.1:7070', 'localhost.attacker.example', '', undefined]) expect(await call(host)).toBe(403);
  });
});

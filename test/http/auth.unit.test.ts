import type { FastifyReply, FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { accessPolicy, isLoopback, operatorName, requireKnownHost, requireToken, resolveTokens, type TokenRule } from '../../src/adapters/http/auth.js';
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
  const call = async (method: string, authorization?: string, rule?: TokenRule, url = '/api/keys') => {
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
    const request = { method, headers: authorization === undefined ? {} : { authorization }, routeOptions: { url } } as FastifyRequest;
    await requireToken(
      [
        { token: 'right', name: null },
        { token: 'alices', name: 'alice' },
      ],
      rule,
    )(request, reply);
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

  it("regression (issue 21: reads off loopback needed no token): with readsToo, a read needs one too, but for the page's own files", async () => {
    const rule = { readsToo: true, openFiles: ['/', '/app.js'] };
    const code = async (method: string, url: string, authorization?: string) => (await call(method, authorization, rule, url)).code;
    expect(await code('GET', '/api/jobs/explain')).toBe(401);
    expect(await code('HEAD', '/metrics')).toBe(401);
    expect(await code('GET', '/metrics', 'Bearer wrong')).toBe(401);
    expect(await code('GET', '/metrics', 'Bearer right')).toBeUndefined();
    expect(await code('GET', '/api/jobs/history', 'Bearer alices')).toBeUndefined();
    expect(await code('GET', '/')).toBeUndefined();
    expect(await code('HEAD', '/app.js')).toBeUndefined();
    expect(await code('POST', '/')).toBe(401);
  });

  it("remembers the operator of a named token for the request; the shared token names nobody", async () => {
    expect(await call('POST', 'Bearer alices')).toEqual({ code: undefined, operator: 'alice' });
    expect(await call('POST', 'Bearer right')).toEqual({ code: undefined, operator: null });
  });
});

describe('requireKnownHost', () => {
  const call = async (bind: string, host: string | undefined) => {
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
    await requireKnownHost(accessPolicy({ bind }))({ headers: host === undefined ? {} : { host } } as FastifyRequest, reply);
    return code;
  };

  it('bound to loopback: passes loopback names with or without a port; refuses any other name, or none', async () => {
    for (const host of ['127.0.0.1:7070', 'localhost', 'localhost:1', '[::1]:7070', '127.9.9.9']) expect(await call('127.0.0.1', host)).toBeUndefined();
    for (const host of ['attacker.example', 'attacker.example:7070', '10.0.0.1:7070', 'localhost.attacker.example', '', undefined]) expect(await call('127.0.0.1', host)).toBe(403);
  });

  it('regression (issue 21: off loopback the Host check was off): bound to 10.0.0.5, a request naming another host is refused 403', async () => {
    expect(await call('10.0.0.5', '10.0.0.5:7070')).toBeUndefined();
    for (const host of ['attacker.example', 'attacker.example:7070', '10.0.0.6', '', undefined]) expect(await call('10.0.0.5', host)).toBe(403);
  });
});

describe('accessPolicy', () => {
  const machine = () => ['127.0.0.1', '::1', '192.0.2.2', 'fd00::2'];

  it('on loopback, as before: reads need no token, only loopback names are served (and the hosts allowed)', () => {
    for (const bind of ['127.0.0.1', 'localhost', '::1']) {
      const policy = accessPolicy({ bind, interfaces: machine });
      expect(policy.readsNeedToken).toBe(false);
      expect(['localhost:7070', '127.0.0.1', '[::1]:7070'].map(policy.answersTo)).toEqual([true, true, true]);
      expect(['192.0.2.2:7070', 'attacker.example'].map(policy.answersTo)).toEqual([false, false]);
    }
    expect(accessPolicy({ bind: '127.0.0.1', allowedHosts: ['jobs.example.com'] }).answersTo('JOBS.example.com:443')).toBe(true);
  });

  it('regression (issue 21: off loopback reads needed no token): bound off loopback, reads need a token unless --public-reads', () => {
    expect(accessPolicy({ bind: '192.0.2.2' }).readsNeedToken).toBe(true);
    expect(accessPolicy({ bind: '0.0.0.0' }).readsNeedToken).toBe(true);
    expect(accessPolicy({ bind: 'jobs.internal' }).readsNeedToken).toBe(true);
    expect(accessPolicy({ bind: '192.0.2.2', publicReads: true }).readsNeedToken).toBe(false);
  });

  it('bound to an address: serves that address, loopback names and the hosts allowed; nothing else', () => {
    const policy = accessPolicy({ bind: '192.0.2.2', allowedHosts: ['jobs.example.com', '[fd00::9]'], interfaces: machine });
    expect(['192.0.2.2:7070', 'localhost', 'jobs.example.com', 'Jobs.Example.Com:8443', '[fd00::9]:7070'].map(policy.answersTo)).toEqual([true, true, true, true, true]);
    expect(['fd00::2', '[fd00::2]:7070', 'attacker.example', 'jobs.example.com.attacker.example', '192.0.2.22', '', undefined].map(policy.answersTo)).toEqual(Array(7).fill(false));
  });

  it('bound to 0.0.0.0 or ::: serves each of the machine\'s addresses', () => {
    for (const bind of ['0.0.0.0', '::']) {
      const policy = accessPolicy({ bind, interfaces: machine });
      expect(['192.0.2.2:7070', '[fd00::2]:7070', '127.0.0.1'].map(policy.answersTo)).toEqual([true, true, true]);
      expect(['0.0.0.0:7070', '192.0.2.3', 'attacker.example'].map(policy.answersTo)).toEqual([false, false, false]);
    }
  });

  it('bound to a DNS name: serves that name', () => {
    const policy = accessPolicy({ bind: 'jobs.internal', interfaces: machine });
    expect(policy.answersTo('jobs.internal:7070')).toBe(true);
    expect(policy.answersTo('192.0.2.2')).toBe(false);
  });
});

import type { FastifyReply, FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { isLoopback, requireLoopbackHost, requireToken, resolveToken } from '../../src/adapters/http/auth.js';

describe('isLoopback', () => {
  it.each(['127.0.0.1', '127.1.2.3', 'localhost', 'LOCALHOST', '::1', '[::1]', '::ffff:127.0.0.1'])('%s is loopback', (host) => {
    expect(isLoopback(host)).toBe(true);
  });
  it.each(['0.0.0.0', '::', '10.0.0.1', '192.168.1.10', '128.0.0.1', 'example.org', 'localhost.example.org', '::ffff:10.0.0.1', ''])('%s is not', (host) => {
    expect(isLoopback(host)).toBe(false);
  });
});

describe('resolveToken', () => {
  it('uses JOBLEDGER_TOKEN when set', () => {
    expect(resolveToken({ JOBLEDGER_TOKEN: 's3cret' })).toEqual({ token: 's3cret', generated: false });
  });
  it('generates a fresh unguessable one when unset or empty', () => {
    const a = resolveToken({});
    const b = resolveToken({ JOBLEDGER_TOKEN: '' });
    expect(a.generated && b.generated).toBe(true);
    expect(a.token).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(a.token).not.toBe(b.token);
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
    await requireToken('right')({ method, headers: authorization === undefined ? {} : { authorization } } as FastifyRequest, reply);
    return sent.code;
  };

  it('lets reads through and the right bearer token; refuses the rest with 401', async () => {
    expect(await call('GET')).toBeUndefined();
    expect(await call('HEAD')).toBeUndefined();
    expect(await call('POST', 'Bearer right')).toBeUndefined();
    expect(await call('POST')).toBe(401);
    expect(await call('POST', 'Bearer wrong')).toBe(401);
    expect(await call('POST', 'Bearer righ')).toBe(401);
    expect(await call('POST', 'right')).toBe(401);
    expect(await call('POST', 'Basic right')).toBe(401);
    expect(await call('DELETE', 'Bearer nope')).toBe(401);
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

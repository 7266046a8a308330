import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';

// Every mutating route needs `Authorization: Bearer <token>`. Reads (the page, the JSON reads,
// /metrics) do not: they change nothing, and the default bind is loopback only.

/** JOBLEDGER_TOKEN, or a fresh random token for this run (`generated`: the caller prints it once). */
export const resolveToken = (env: NodeJS.ProcessEnv): { token: string; generated: boolean } => {
  const given = env.JOBLEDGER_TOKEN;
  if (given !== undefined && given !== '') return { token: given, generated: false };
  return { token: randomBytes(24).toString('base64url'), generated: true };
};

/** 127.0.0.0/8, ::1 and localhost: the addresses only this machine reaches. */
export const isLoopback = (host: string): boolean => {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  return h === '::1' || h === '0:0:0:0:0:0:0:1' || /^::ffff:127\./.test(h);
};

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/**
 * A Fastify onRequest hook refusing (401) any request but GET/HEAD/OPTIONS without the token. It
 * runs before the body is read, so an unauthenticated request costs no parsing. Digests are
 * compared in constant time: the comparison MUST NOT leak how much of a guess was right.
 */
export const requireToken = (token: string) => {
  const expected = digest(token);
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    if (request.method === 'GET' || request.method === 'HEAD' || request.method === 'OPTIONS') return;
    const match = /^Bearer (.+)$/.exec(request.headers.authorization ?? '');
    if (match && timingSafeEqual(digest(match[1]!), expected)) return;
    await reply
      .code(401)
      .header('www-authenticate', 'Bearer realm="jobledger"')
      .send({ error: match ? 'the bearer token is wrong' : 'this route needs Authorization: Bearer <JOBLEDGER_TOKEN>' });
  };
};

/**
 * For a server bound to loopback: refuses (403) a request whose Host is not a loopback name. A web
 * page elsewhere whose DNS name is rebound to 127.0.0.1 would otherwise read the JSON API (the
 * reads need no token) through the operator's own browser.
 */
export const requireLoopbackHost = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
  const host = (request.headers.host ?? '').replace(/:\d+$/, '');
  if (isLoopback(host)) return;
  await reply.code(403).send({ error: `Host ${JSON.stringify(request.headers.host ?? '')} is not this machine; open the dashboard at http://127.0.0.1 or http://localhost` });
};

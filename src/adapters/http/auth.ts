import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ValidationError } from '../../domain/values.js';

// Every mutating route needs `Authorization: Bearer <token>`. Reads (the page, the JSON reads,
// /metrics) do not: they change nothing, and the default bind is loopback only.
//
// Tokens come from the environment: named ones (JOBLEDGER_TOKENS="alice:<token>,bob:<token>", or
// JOBLEDGER_TOKENS_FILE, one name:token a line) record each action under the operator's name,
// which the request cannot override (src/adapters/http/input.ts operator()). The single
// JOBLEDGER_TOKEN names nobody: everyone who has it shares it, so its actions are recorded as
// before, under the body's `by` or the client's address, and it may be set beside named ones
// (for scripts, while operators move to their own).

/** A token a mutating request may carry, and who it is: `name` null for the shared JOBLEDGER_TOKEN. */
export interface AccessToken {
  readonly token: string;
  readonly name: string | null;
}

/** Printable, no spaces, no ':' (the separator), as long as an Actor: a name the audit shows as given. */
const OPERATOR_NAME = /^[^\s:\p{Cc}]{1,200}$/u;

/** `name:token` entries (the token is the rest after the first ':', so it may hold ':'). `where(i)` names the entry in errors, never its token. */
const parseEntries = (variable: string, entries: readonly { readonly text: string; readonly where: string }[]): AccessToken[] => {
  const tokens: AccessToken[] = [];
  for (const { text, where } of entries) {
    const colon = text.indexOf(':');
    if (colon < 0) throw new ValidationError(variable, `${where} is not name:token`);
    const name = text.slice(0, colon).trim();
    const token = text.slice(colon + 1).trim();
    if (name === '') throw new ValidationError(variable, `${where} has an empty name`);
    if (!OPERATOR_NAME.test(name)) throw new ValidationError(variable, `${where}: the name ${JSON.stringify(name)} must be 1-200 printable characters without spaces or ':'`);
    if (token === '') throw new ValidationError(variable, `${where} (${name}) has an empty token`);
    const same = tokens.find((t) => t.token === token);
    if (same) throw new ValidationError(variable, `${where} (${name}) has the same token as ${same.name}: each operator needs a token of their own`);
    tokens.push({ name, token });
  }
  if (tokens.length === 0) throw new ValidationError(variable, 'names no token (expected name:token entries)');
  return tokens;
};

const fromList = (list: string): AccessToken[] =>
  parseEntries(
    'JOBLEDGER_TOKENS',
    list.split(',').map((text, i) => ({ text, where: `entry ${i + 1}` })),
  );

const fromFile = (path: string, readFile: (path: string) => string): AccessToken[] => {
  let text: string;
  try {
    text = readFile(path);
  } catch (error) {
    throw new ValidationError('JOBLEDGER_TOKENS_FILE', `cannot read ${JSON.stringify(path)}: ${(error as Error).message}`);
  }
  const entries = text.split(/\r?\n/).flatMap((line, i) => (line.trim() === '' || line.trimStart().startsWith('#') ? [] : [{ text: line, where: `line ${i + 1}` }]));
  return parseEntries('JOBLEDGER_TOKENS_FILE', entries);
};

/**
 * The tokens of this run: the named ones (JOBLEDGER_TOKENS or JOBLEDGER_TOKENS_FILE, not both)
 * and JOBLEDGER_TOKEN; when none is set, a fresh random unnamed token (`generated`: the caller
 * prints it once). Bad configuration is a ValidationError naming the variable: an empty name or
 * token, a token given twice, an unreadable file.
 */
export const resolveTokens = (env: NodeJS.ProcessEnv, readFile: (path: string) => string = (path) => readFileSync(path, 'utf8')): { tokens: AccessToken[]; generated: boolean } => {
  const list = env.JOBLEDGER_TOKENS ?? '';
  const file = env.JOBLEDGER_TOKENS_FILE ?? '';
  if (list !== '' && file !== '') throw new ValidationError('JOBLEDGER_TOKENS_FILE', 'set it or JOBLEDGER_TOKENS, not both');
  const named = list !== '' ? fromList(list) : file !== '' ? fromFile(file, readFile) : [];
  const shared = env.JOBLEDGER_TOKEN ?? '';
  if (shared !== '') {
    const same = named.find((t) => t.token === shared);
    if (same) throw new ValidationError('JOBLEDGER_TOKEN', `is also ${same.name}'s named token: the shared token must differ from every named one`);
    return { tokens: [...named, { token: shared, name: null }], generated: false };
  }
  if (named.length > 0) return { tokens: named, generated: false };
  return { tokens: [{ token: randomBytes(24).toString('base64url'), name: null }], generated: true };
};

/** 127.0.0.0/8, ::1 and localhost: the addresses only this machine reaches. */
export const isLoopback = (host: string): boolean => {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  return h === '::1' || h === '0:0:0:0:0:0:0:1' || /^::ffff:127\./.test(h);
};

const digest = (s: string): Buffer => createHash('sha256').update(s).digest();

/** The operator a named token authenticated, per request (set by requireToken). */
const operators = new WeakMap<FastifyRequest, string>();

/** The name of the named token the request carried; null for the shared token, and for reads. */
export const operatorName = (request: FastifyRequest): string | null => operators.get(request) ?? null;

/**
 * A Fastify onRequest hook refusing (401) any request but GET/HEAD/OPTIONS without one of the
 * tokens, and remembering the operator a named one stands for. It runs before the body is read,
 * so an unauthenticated request costs no parsing. Digests are compared in constant time, and with
 * every token whatever matched: the comparison MUST NOT leak how much of a guess was right, nor
 * which token it was close to.
 */
export const requireToken = (tokens: readonly AccessToken[]) => {
  if (tokens.length === 0) throw new TypeError('tokens: at least one is required');
  const expected = tokens.map((t) => ({ digest: digest(t.token), name: t.name }));
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    if (request.method === 'GET' || request.method === 'HEAD' || request.method === 'OPTIONS') return;
    const match = /^Bearer (.+)$/.exec(request.headers.authorization ?? '');
    if (match) {
      const given = digest(match[1]!);
      let found: { name: string | null } | undefined;
      for (const e of expected) if (timingSafeEqual(given, e.digest) && found === undefined) found = e;
      if (found !== undefined) {
        if (found.name !== null) operators.set(request, found.name);
        return;
      }
    }
    await reply
      .code(401)
      .header('www-authenticate', 'Bearer realm="jobledger"')
      .send({ error: match ? 'the bearer token is wrong' : 'this route needs Authorization: Bearer <token> (JOBLEDGER_TOKEN, or your own of JOBLEDGER_TOKENS)' });
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

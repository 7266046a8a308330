import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { ValidationError } from '../../domain/values.js';

// Every mutating route needs `Authorization: Bearer <token>`. Reads (the JSON reads, /metrics)
// need one too when the server is bound off loopback, unless its operator made them public
// (serve --public-reads): they show job args, errors and who did what (issue 21). On loopback, the
// default, they need none. The page's own files (HTML, scripts, styles) never need one: they hold
// no data, and a browser opening the page cannot send a bearer token; the page sends it with
// every read.
//
// Every request's Host must be a name the server answers to (accessPolicy), against DNS
// rebinding: a page elsewhere whose DNS name is rebound to this server's address would otherwise
// read the API through the operator's own browser.
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

/** Which requests need a token, besides every one but GET/HEAD/OPTIONS. */
export interface TokenRule {
  /** Reads need one too (bound off loopback, reads not made public). */
  readonly readsToo: boolean;
  /** Route paths anyone may read even so: the page's own files, which show no data. */
  readonly openFiles: readonly string[];
}

/**
 * A Fastify onRequest hook refusing (401) a request `rule` says needs a token when it carries none
 * of the tokens, and remembering the operator a named one stands for. It runs before the body is
 * read, so an unauthenticated request costs no parsing. Digests are compared in constant time, and
 * with every token whatever matched: the comparison MUST NOT leak how much of a guess was right,
 * nor which token it was close to.
 */
export const requireToken = (tokens: readonly AccessToken[], rule: TokenRule = { readsToo: false, openFiles: [] }) => {
  if (tokens.length === 0) throw new TypeError('tokens: at least one is required');
  const expected = tokens.map((t) => ({ digest: digest(t.token), name: t.name }));
  const openFiles = new Set(rule.openFiles);
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const read = request.method === 'GET' || request.method === 'HEAD' || request.method === 'OPTIONS';
    if (read && (!rule.readsToo || openFiles.has(request.routeOptions.url ?? ''))) return;
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

/** 0.0.0.0 and ::: every address of the machine. */
const isWildcard = (host: string): boolean => ['0.0.0.0', '::', '0:0:0:0:0:0:0:0'].includes(host);

/** A host as the Host check compares it: lowercase, an IPv6 address without its brackets. */
const normalHost = (host: string): string => host.replace(/^\[|\]$/g, '').toLowerCase();

/** The name a Host header gives, without its port (an IPv6 address is bracketed: "[::1]:7070"). */
const hostOfHeader = (header: string): string => normalHost(header.startsWith('[') ? header.slice(0, header.indexOf(']') + 1) : header.replace(/:\d*$/, ''));

/** The machine's own addresses, which a server bound to 0.0.0.0 or :: is reached at. */
const ownAddresses = (): string[] => Object.values(networkInterfaces()).flatMap((addresses) => (addresses ?? []).map((a) => a.address));

export interface AccessOptions {
  /** The address the server is bound to (serve --host). */
  readonly bind: string;
  /** Off loopback, serve reads without a token (serve --public-reads). */
  readonly publicReads?: boolean;
  /** Further names the Host header may give (serve --allowed-host): a proxy's, a DNS name of the machine. */
  readonly allowedHosts?: readonly string[];
  /** The machine's addresses, for a wildcard bind (default: os.networkInterfaces()). */
  readonly interfaces?: () => readonly string[];
}

/** Who may read, and which Host names the server answers to, from where it is bound. */
export interface AccessPolicy {
  readonly loopback: boolean;
  /** Reads need a token: bound off loopback, unless reads were made public. */
  readonly readsNeedToken: boolean;
  /** Whether a request's Host header names this server: a loopback name, the bound address (each of the machine's for 0.0.0.0 or ::), or an allowed host. */
  answersTo(hostHeader: string | undefined): boolean;
}

/**
 * The access policy of a server bound to `bind`. Loopback names always pass the Host check: a
 * rebound DNS name is never one, and the machine's own clients use them.
 */
export const accessPolicy = ({ bind, publicReads = false, allowedHosts = [], interfaces = ownAddresses }: AccessOptions): AccessPolicy => {
  const loopback = isLoopback(bind);
  const bound = normalHost(bind);
  const names = new Set([...(loopback ? [] : isWildcard(bound) ? interfaces() : [bound]), ...allowedHosts].map(normalHost));
  return {
    loopback,
    readsNeedToken: !loopback && !publicReads,
    answersTo: (header) => {
      if (header === undefined || header === '') return false;
      const host = hostOfHeader(header);
      return isLoopback(host) || names.has(host);
    },
  };
};

/**
 * A Fastify onRequest hook refusing (403) a request whose Host is not a name `policy` answers to.
 * 403, as the loopback check always answered: the server understood the request and will not
 * serve it under that name.
 */
export const requireKnownHost =
  (policy: AccessPolicy) =>
  async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    if (policy.answersTo(request.headers.host)) return;
    const host = JSON.stringify(request.headers.host ?? '');
    await reply.code(403).send({
      error: policy.loopback
        ? `Host ${host} is not this machine; open the dashboard at http://127.0.0.1 or http://localhost`
        : `Host ${host} is not a name this server answers to; its operator may add it (jobledger serve --allowed-host)`,
    });
  };

import Fastify, { type FastifyError, type FastifyInstance } from 'fastify';
import { ReadBudgetError } from '../../commands/read-budget.js';
import { RefusedError, UnknownJobError, UnknownKeyError } from '../../domain/errors.js';
import { silentLogger, type Logger } from '../../domain/ports/logger.js';
import { EventDecodeError } from '../../domain/recorded.js';
import { MAX_ARGS_BYTES, ValidationError } from '../../domain/values.js';
import type { Ledger } from '../ledger.js';
import { accessPolicy, operatorName, requireKnownHost, requireToken, type AccessToken } from './auth.js';
import { READ_BUDGET_MS, readBudgets } from './input.js';
import { registerMetrics } from './metrics.js';
import { registerAuditRoutes } from './routes/audit.js';
import { registerJobRoutes } from './routes/jobs.js';
import { registerKeyRoutes } from './routes/keys.js';
import { PAGE_FILES, registerPage } from './routes/page.js';
import { registerWorkerRoutes } from './routes/workers.js';
import { registerFreshAnswers } from './fresh-answers.js';

export interface HttpServerOptions {
  readonly ledger: Ledger;
  /** The shared bearer token (JOBLEDGER_TOKEN): its actions are recorded under the body's `by` or the client's address. */
  readonly token?: string;
  /** Further tokens, each of one operator (JOBLEDGER_TOKENS, see resolveTokens); every mutating route requires one of these or `token`. */
  readonly tokens?: readonly AccessToken[];
  /**
   * The address the server will listen on (default 127.0.0.1; pass the same to listen()). Off
   * loopback, reads need a token too unless `publicReads`; a request is served only under a Host
   * naming this server: a loopback name, this address (or the machine's, for 0.0.0.0 and ::), or
   * one of `allowedHosts` (see accessPolicy).
   */
  readonly host?: string;
  /** Off loopback, serve reads without a token. */
  readonly publicReads?: boolean;
  /** Further names a request's Host may give. */
  readonly allowedHosts?: readonly string[];
  /** Largest request body in bytes (default: the largest job args plus room for the other fields); a larger one gets 413. */
  readonly bodyLimit?: number;
  /** How long a GET may read the ledger itself (audit, a job's history, explain) before it is answered 503 (default READ_BUDGET_MS). */
  readonly readBudgetMs?: number;
  /**
   * How long the answer to a read the page polls (POLLED_READS) answers the same URL again without
   * reading the ledger (default 0: every poll reads what it depends on, and shares only answers
   * under one ETag). `serve` runs with 1 s: a moving ledger then costs one read of each a second
   * however many pages poll, each answer up to that old as to other processes' writes; this
   * server's own mutating requests are seen at once (fresh-answers.ts).
   */
  readonly answersFreshMs?: number;
  readonly logger?: Logger;
}

export const DEFAULT_BODY_LIMIT = MAX_ARGS_BYTES + 64 * 1024;

/** The JSON an error is answered with; `field` names the input at fault on a 400. */
interface ErrorBody {
  readonly error: string;
  readonly field?: string;
  /** A quarantined key's event that does not decode: where it is. */
  readonly stream?: string;
  readonly revision?: number;
  readonly position?: string | null;
}

const statusOf = (error: unknown): number => {
  if (error instanceof ValidationError) return 400;
  if (error instanceof UnknownKeyError || error instanceof UnknownJobError) return 404;
  if (error instanceof RefusedError || error instanceof EventDecodeError) return 409;
  if (error instanceof ReadBudgetError) return 503;
  const status = (error as FastifyError).statusCode;
  // Fastify's own client errors: unparsable JSON (400), body too large (413), wrong media type (415).
  return typeof status === 'number' && status >= 400 && status < 500 ? status : 500;
};

/**
 * The JSON an error is answered with. A client error names the input at fault: a ValidationError
 * its field, and what fastify's body parser refused (bad JSON, too large, wrong media type) `(body)`.
 */
const bodyOf = (error: unknown, status: number): ErrorBody => {
  if (error instanceof ReadBudgetError) return { error: error.message };
  if (status >= 500) return { error: 'internal error (see the server log)' };
  if (error instanceof ValidationError) return { error: error.message, field: error.field };
  if (error instanceof EventDecodeError) return { error: error.message, stream: error.stream, revision: error.revision, position: error.position === null ? null : `${error.position.commit}/${error.position.prepare}` };
  const message = (error as Error).message;
  return (error as FastifyError).code?.startsWith('FST_ERR_CTP') ? { error: `(body): ${message}`, field: '(body)' } : { error: message };
};

/**
 * The HTTP API, /metrics and the dashboard page over a ledger. Not listening yet: call
 * `listen({ port, host })` (tests use port 0), and `close()` to stop.
 */
export const createHttpServer = async (options: HttpServerOptions): Promise<FastifyInstance> => {
  const log = options.logger ?? silentLogger;
  const app = Fastify({ logger: false, bodyLimit: options.bodyLimit ?? DEFAULT_BODY_LIMIT, return503OnClosing: true });
  const policy = accessPolicy({ bind: options.host ?? '127.0.0.1', publicReads: options.publicReads ?? false, allowedHosts: options.allowedHosts ?? [] });
  app.addHook('onRequest', requireKnownHost(policy));
  const tokens = [...(options.tokens ?? []), ...(options.token === undefined ? [] : [{ token: options.token, name: null }])];
  app.addHook('onRequest', requireToken(tokens, { readsToo: policy.readsNeedToken, openFiles: PAGE_FILES }));
  app.addHook('onSend', async (request, reply) => {
    reply.header('x-content-type-options', 'nosniff');
    // no-store, not no-cache (which lets a browser keep an answer to revalidate): the answers hold
    // keys, job args and workers, read under a bearer token, and stay off disk and out of any
    // cache. Revalidation needs no HTTP cache: the page keeps its last answer in memory and sends
    // If-None-Match itself (ui.js getJson); the polled reads answer 304 (src/adapters/http/etag.ts).
    if (request.url.startsWith('/api/')) reply.header('cache-control', 'no-store');
  });
  app.setErrorHandler(async (error, request, reply) => {
    const status = statusOf(error);
    // A poll's tag was set before its read failed: an error is no representation to revalidate.
    reply.removeHeader('etag');
    // A read past its budget is the server keeping itself free, not a fault: said, not traced.
    if (error instanceof ReadBudgetError) log.warn({ method: request.method, url: request.url, budgetMs: error.budgetMs }, 'HTTP read stopped at its budget');
    else if (status >= 500) log.error({ err: error, method: request.method, url: request.url }, 'HTTP request failed');
    return reply.code(status).send(bodyOf(error, status));
  });
  app.setNotFoundHandler(async (request, reply) => reply.code(404).send({ error: `no route ${request.method} ${request.url.split('?')[0]}` } satisfies ErrorBody));
  registerPage(app);
  const budgets = readBudgets(options.readBudgetMs ?? READ_BUDGET_MS);
  // After the host and token checks (registered before it): a kept answer is sent only to a request allowed to read it.
  registerFreshAnswers(app, { freshMs: options.answersFreshMs ?? 0 });
  registerKeyRoutes(app, options.ledger, budgets);
  registerWorkerRoutes(app, options.ledger);
  registerJobRoutes(app, options.ledger, budgets);
  registerAuditRoutes(app, options.ledger, budgets);
  /** Who the bearer token stands for: `{ name }`, null for the shared token (a POST: only mutating routes check the token). */
  app.post('/api/whoami', async (request) => ({ name: operatorName(request) }));
  registerMetrics(app, options.ledger);
  await app.ready();
  return app;
};

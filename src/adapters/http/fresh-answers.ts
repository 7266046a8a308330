import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { holdsTag } from './etag.js';

// Every read the page polls, answered at most once per `freshMs` for each URL, however many pages
// poll it. A ledger in use moves between any two polls: ten pages polling every 2 s then asked
// each read five times a second, each time reading what it depends on (its ETag) and, the tag
// having moved, the read itself; their overview alone was five reads a poll. Now a request for a
// URL answered less than freshMs ago gets that answer (its body as sent, its `now` included: the
// answer says when it was true; its ETag, and 304 for a poll that holds it), and requests that
// arrive while its read runs wait for it. An answer may so be up to freshMs old as to other
// processes' writes; a write through this server is seen at once: every mutating request forgets
// them, before it runs and once it has answered, and an answer read meanwhile is not kept. Only a
// 200 is kept (an error, a 304, a 503 past the read budget are each request's own).

/** The GETs the page polls (app.js refresh, the views' reads). */
export const POLLED_READS: ReadonlySet<string> = new Set(['/api/keys', '/api/keys/detail', '/api/workers', '/api/queues', '/api/jobs', '/api/jobs/explain', '/api/jobs/history']);

interface Kept {
  readonly payload: string;
  readonly etag: string | undefined;
  readonly contentType: string | undefined;
}

interface Entry {
  /** When its read began (the clock's ms): its age counts from then. */
  readonly at: number;
  readonly generation: number;
  readonly answer: Promise<Kept | undefined>;
  settle(kept: Kept | undefined): void;
}

const ENTRY = Symbol('fresh answer being read');
type Marked = FastifyRequest & { [ENTRY]?: Entry };

export const registerFreshAnswers = (app: FastifyInstance, { freshMs, clock = () => performance.now() }: { readonly freshMs: number; readonly clock?: () => number }): { readonly kept: () => number } => {
  // The answers kept, one per URL read in the last freshMs, oldest first (each URL's entry is
  // moved to the end when read again): a URL not polled again is let go, so a server that is only
  // read (its writes come through other processes) keeps no more than the URLs of its last freshMs.
  const entries = new Map<string, Entry>();
  const kept = { kept: () => entries.size };
  if (freshMs <= 0) return kept;
  const letGo = (now: number): void => {
    for (const [url, entry] of entries) {
      if (now - entry.at < freshMs) return;
      entries.delete(url);
    }
  };
  let generation = 0;
  const forget = (): void => {
    generation++;
    entries.clear();
  };

  const send = (reply: FastifyReply, kept: Kept, request: FastifyRequest): FastifyReply => {
    if (kept.etag !== undefined) reply.header('etag', kept.etag);
    if (kept.etag !== undefined && holdsTag(request, kept.etag)) return reply.code(304).send();
    if (kept.contentType !== undefined) reply.header('content-type', kept.contentType);
    return reply.send(kept.payload);
  };

  app.addHook('onRequest', async (request: Marked, reply) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') return forget();
    if (!POLLED_READS.has(request.url.split('?', 1)[0]!)) return;
    letGo(clock());
    const found = entries.get(request.url);
    if (found !== undefined) {
      const kept = await found.answer;
      if (kept !== undefined) return send(reply, kept, request);
    }
    let settle!: (kept: Kept | undefined) => void;
    const answer = new Promise<Kept | undefined>((resolve) => (settle = resolve));
    const entry: Entry = { at: clock(), generation, answer, settle };
    entries.delete(request.url);
    entries.set(request.url, entry);
    request[ENTRY] = entry;
  });

  app.addHook('onSend', async (request: Marked, reply, payload) => {
    const entry = request[ENTRY];
    if (entry === undefined) return payload;
    request[ENTRY] = undefined;
    const keep = reply.statusCode === 200 && typeof payload === 'string' && entry.generation === generation;
    const etag = reply.getHeader('etag');
    const contentType = reply.getHeader('content-type');
    entry.settle(keep ? { payload, etag: typeof etag === 'string' ? etag : undefined, contentType: typeof contentType === 'string' ? contentType : undefined } : undefined);
    if (!keep && entries.get(request.url) === entry) entries.delete(request.url);
    return payload;
  });

  app.addHook('onResponse', async (request: Marked) => {
    // A request that ended without a body sent (an aborted one): whoever waits on it reads again.
    const entry = request[ENTRY];
    if (entry !== undefined) {
      entry.settle(undefined);
      if (entries.get(request.url) === entry) entries.delete(request.url);
    }
    if (request.method !== 'GET' && request.method !== 'HEAD') forget();
  });
  return kept;
};

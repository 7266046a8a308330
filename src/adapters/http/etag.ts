import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';

// Polls that change nothing cost nothing: the dashboard's periodic reads answer with an ETag made
// of what their answer depends on (LedgerVersion, src/adapters/postgres/queries/ledger-version.ts:
// read cheaply, before the read itself), and a request whose If-None-Match holds it gets 304 with
// no body and no read. The tags are weak (W/): two answers under one tag are the same but for the
// clock, their `now` and the ages measured from it (a worker's seenAgoMs, a queue's oldestAgeMs),
// which a client that keeps its body moves on by the time since (RFC 9110 8.8.1: equivalent, not
// byte-identical). What changes with the clock alone (a lease running out, a worker going silent,
// an admission waiting past the warning's threshold) is part of the tag.

/** A weak ETag of `parts` (JSON-able): equal parts, equal tag. */
export const weakTag = (parts: readonly unknown[]): string => `W/"${createHash('sha256').update(JSON.stringify(parts)).digest('base64url').slice(0, 27)}"`;

const opaque = (tag: string): string => tag.trim().replace(/^W\//, '');

/** Whether the request's If-None-Match holds `tag` (or is `*`), by the weak comparison a GET's If-None-Match uses (RFC 9110 13.1.2). */
export const holdsTag = (request: FastifyRequest, tag: string): boolean => {
  const header = request.headers['if-none-match'];
  if (header === undefined) return false;
  const wanted = opaque(tag);
  return header.split(',').some((t) => t.trim() === '*' || opaque(t) === wanted);
};

/**
 * Answers 304 when the request already holds `tag`: true, the reply is sent (the route returns
 * it). Otherwise sets `tag` as the answer's ETag: call it once the answer is certain to be a 200.
 */
export const notModified = (request: FastifyRequest, reply: FastifyReply, tag: string): boolean => {
  reply.header('etag', tag);
  if (!holdsTag(request, tag)) return false;
  void reply.code(304).send();
  return true;
};

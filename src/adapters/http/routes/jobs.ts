import type { FastifyInstance } from 'fastify';
import * as t from 'io-ts';
import type { EnqueueInput } from '../../../commands/enqueue.js';
import { Actor, JobId, Key, Text } from '../../../domain/values.js';
import { JobStatus } from '../../postgres/queries/list-jobs.js';
import type { Ledger } from '../../ledger.js';
import { closedObject, decodeInput, IntegerString, operator, VIA } from '../input.js';

const JobsQuery = closedObject({}, { key: Key, status: JobStatus, limit: IntegerString, cursor: Text });
const CancelBody = closedObject({ jobId: JobId }, { by: Actor });

/**
 * The enqueue body's fields: EnqueueInput's, checked by the ledger's own io-ts codec
 * (src/commands/enqueue.ts), plus `by`. Typed as a record of EnqueueInput's keys, so a field added
 * there must be added here.
 */
const ENQUEUE_FIELDS: Record<keyof EnqueueInput, true> = {
  name: true,
  args: true,
  key: true,
  limit: true,
  ownsLimit: true,
  leaseMs: true,
  priority: true,
  runAt: true,
  delayMs: true,
  maxAttempts: true,
  queue: true,
  jobId: true,
  whenFull: true,
  limits: true,
};
const EnqueueBody = closedObject({}, { ...Object.fromEntries(Object.keys(ENQUEUE_FIELDS).map((f) => [f, t.unknown])), by: Actor });

export const registerJobRoutes = (app: FastifyInstance, ledger: Ledger): void => {
  /** Newest first; `cursor` is the previous page's nextCursor. */
  app.get('/api/jobs', async (request) => ledger.jobs(decodeInput(JobsQuery, request.query, '(query)')));

  app.post('/api/jobs', async (request, reply) => {
    const { by, ...input } = decodeInput(EnqueueBody, request.body, '(body)') as EnqueueInput & { by?: string };
    const { jobId, status } = await ledger.enqueue(input, { by: operator(request, by), ...VIA });
    return reply.code(status === 'duplicate' ? 200 : 201).send({ jobId, status });
  });

  app.post('/api/jobs/cancel', async (request) => {
    const body = decodeInput(CancelBody, request.body, '(body)');
    return ledger.cancel({ jobId: body.jobId, by: operator(request, body.by) }, VIA);
  });
};

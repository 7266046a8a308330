import type { FastifyInstance } from 'fastify';
import * as t from 'io-ts';
import type { DeadJobsInput } from '../../../commands/dead-jobs.js';
import type { EnqueueInput } from '../../../commands/enqueue.js';
import { Actor, JobId, Key, Name, QueueName, Text } from '../../../domain/values.js';
import { JobStatusFilter } from '../../postgres/queries/list-jobs.js';
import type { Ledger } from '../../ledger.js';
import { closedObject, decodeInput, IntegerString, operator, type ReadBudgets, VIA } from '../input.js';

const JobsQuery = closedObject({}, { key: Key, name: Name, queue: QueueName, status: JobStatusFilter, limit: IntegerString, cursor: Text });
const CancelBody = closedObject({ jobId: JobId }, { by: Actor });
/** The jobs are checked by the ledger (ids, one of jobIds or key), which names the field at fault. */
const DeadJobsBody = closedObject({}, { jobIds: t.unknown, key: t.unknown, by: Actor });
const HistoryQuery = closedObject({ jobId: JobId }, { renewals: t.union([t.literal('folded'), t.literal('all')]) });
const ExplainQuery = closedObject({ jobId: JobId }, { at: Text });

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

// The JSON each route answers with (errors: { error, field? } with 400 for bad input, 404 for an
// unknown job or key, 409 for a refusal; see server.ts):
//
// GET /api/jobs?key&name&queue&status&limit&cursor -> { jobs: JobRow[], nextCursor: string | null }
//   status: pending | scheduled | parked | holding | running | completed | dead | cancelled |
//   discarded, or failed (last attempt failed, waiting for its retry: scheduled with an attempt
//   used). JobRow: { jobId, key (null: no key), name, queue, status, attempts, maxAttempts,
//   priority, enqueuedAt, runAt, startedAt, finishedAt (epoch ms or null), lastError,
//   finishReason (JobDead's reason for a dead job), workerId }. Newest first.
// POST /api/jobs/retry { jobIds: string[] } or { key }, by? -> { retried: [{ jobId, status: 'acquired' | 'parked' }] }
//   Each dead job runs again with a fresh set of attempts, admitted like an arrival; { key }: every
//   dead job of the key (at most 1000). All or nothing: one job that is not dead is a 409 naming
//   it, and nothing is written.
// POST /api/jobs/discard-dead { jobIds } or { key }, by? -> { discarded: string[] }
//   Dead jobs off the failed list for good (status discarded, finishReason "dead, then discarded by …").
// GET /api/jobs/explain?jobId&at -> Explanation (src/domain/explain.ts): at is an ISO-8601 time
//   or epoch ms (default now). { jobId, key, asOf, status (unknown | scheduled | parked | holding |
//   running | completed | dead | cancelled | discarded | rejected | replaced), attempts,
//   maxAttempts (null once finished), limits: [{ key, own, limit, holding, paused: { by, reason,
//   since } | null, blocking, place: { n, of } | null, ahead: jobId[], holders: [{ jobId, home,
//   lease: { leaseId, state: running | unstarted | expired | home, heldSince, workerId, startedAt,
//   expiresAt } }] }], schedule: { runAt, due, why } | null, holding: { lease, how: acquired |
//   promoted, waitedMs } | null, ended: { at, reason, by, lastError } | null, waits: [{ kind:
//   parked, from, until, ms, on: [{ key, why: full | paused }] } | { kind: scheduled, from, until,
//   ms, runAt, why }], waited: { parkedMs, scheduledMs } }. Times are epoch ms.
// GET /api/jobs/history?jobId[&renewals=all] -> { jobId, key, stream, renewals, events: [{ stream,
//   revision, type, at, by, via, workerId, why, inWords, data, renewals? }] }: every event of the
//   job on its key and its limit keys, in the ledger's order; a run of renewals of one lease is one
//   event (its last, with renewals: { count, firstAt, firstRevision }) unless renewals=all.
// Both read the ledger within READ_BUDGET_MS, else 503.
export const registerJobRoutes = (app: FastifyInstance, ledger: Ledger, readBudget: ReadBudgets): void => {
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

  app.post('/api/jobs/retry', async (request) => {
    const { by, ...jobs } = decodeInput(DeadJobsBody, request.body, '(body)');
    return ledger.retry({ ...jobs, by: operator(request, by) } as DeadJobsInput, VIA);
  });

  app.post('/api/jobs/discard-dead', async (request) => {
    const { by, ...jobs } = decodeInput(DeadJobsBody, request.body, '(body)');
    return ledger.discardDead({ ...jobs, by: operator(request, by) } as DeadJobsInput, VIA);
  });

  app.get('/api/jobs/explain', async (request) => {
    const { jobId, at } = decodeInput(ExplainQuery, request.query, '(query)');
    return ledger.explain({ jobId, ...(at === undefined ? {} : { at }) }, readBudget());
  });

  app.get('/api/jobs/history', async (request) => ledger.jobHistory(decodeInput(HistoryQuery, request.query, '(query)'), readBudget()));
};

import type { FastifyInstance, FastifyRequest } from 'fastify';
import * as t from 'io-ts';
import { Reason } from '../../../domain/commands.js';
import { UnknownKeyError } from '../../../domain/errors.js';
import { Actor, JobId, Key, LeaseMs, Limit, Text } from '../../../domain/values.js';
import type { Ledger } from '../../ledger.js';
import { detailList } from '../../postgres/queries/key-detail.js';
import { KeySort, SortDirection, keyPageOrder } from '../../postgres/queries/key-page.js';
import { weakTag, notModified } from '../etag.js';
import { SharedAnswers } from '../shared-answers.js';
import { BooleanString, closedObject, decodeInput, IntegerString, operator, type ReadBudgets, VIA } from '../input.js';
import { UNSTARTED_WARNING_MS, warningsOf } from './warnings.js';

/** Recent handoffs shown with a key's detail; the whole history is GET /api/audit. */
export const RECENT_HANDOFFS = 50;

const KeysQuery = closedObject({}, { limit: IntegerString, offset: IntegerString, sort: KeySort, dir: SortDirection, match: Text, atLimit: BooleanString, attention: BooleanString });
const KeyQuery = closedObject({ key: Key }, { limit: IntegerString });
const ReleaseBody = closedObject({ key: Key }, { jobId: JobId, by: Actor, force: t.boolean });
const DiscardBody = closedObject({ key: Key }, { jobIds: t.array(JobId), by: Actor });
const LimitBody = closedObject({ key: Key, limit: Limit }, { by: Actor, leaseMs: LeaseMs });
const PauseBody = closedObject({ key: Key }, { by: Actor, reason: Reason });

export const registerKeyRoutes = (app: FastifyInstance, ledger: Ledger, readBudget: ReadBudgets, shared: SharedAnswers = new SharedAnswers()): void => {
  /**
   * The cards' totals over every key, the warnings (one per cause) and a page of the keys, sorted
   * and filtered by the database: `{ now, totals: { keys, keysAtLimit, slotsHeld, parked,
   * scheduled, oldestParkedAt, holders: { running, unstarted, expired, workerGone }, workers:
   * { live, gone }, ledger: { events, archivedEvents, bytes, archivedBytes } }, warnings:
   * Warning[], page: { sort, dir, limit, offset, matched }, keys: (KeyRow & { attention })[] }`.
   * Query: limit (1-200, default 50), offset, sort (KEY_SORTS), dir, match, atLimit, attention.
   * `slotsHeld` counts every holder whatever its state; only `holders.running` are run by a live
   * worker. With an ETag (what the answer depends on, read first) and 304 for a poll that holds it;
   * one read answers every request under a tag (SharedAnswers).
   */
  app.get('/api/keys', async (request, reply) => {
    const query = decodeInput(KeysQuery, request.query, '(query)');
    // Checked before anything is read; with its defaults filled in, the page's tag names one page however it is asked.
    const order = keyPageOrder(query);
    const now = ledger.now();
    const [v, size] = await Promise.all([ledger.version(now, UNSTARTED_WARNING_MS), ledger.ledgerSize()]);
    const tag = weakTag(['keys', order, v.head, v.pending, v.projected, v.quarantined, v.presence, v.expired, v.unstarted, size]);
    if (notModified(request, reply, tag)) return reply;
    const answer = await shared.of(tag, async () => {
      const [page, queues] = await Promise.all([ledger.keyPage({ ...query, unstartedAfterMs: UNSTARTED_WARNING_MS }, now), ledger.queues()]);
      return { totals: { ...page.totals, ledger: size }, warnings: warningsOf(page, queues), page: { ...page.order, matched: page.matched }, keys: page.keys };
    });
    return { now, ...answer };
  });

  /**
   * Holders, parked jobs in promotion order, scheduled jobs, and the latest handoffs (newest
   * first): `{ now, ...KeyDetail, handoffs }`. Each list holds its first `limit` jobs (1-1000,
   * default 100) and `counts` says how many there are. Each holder has `state` (running, unstarted,
   * expired, worker-gone), `workerId`, `renewedAt` (its last renewal or start), `acquiredAt`
   * (unstarted since), `expiresAt`, `workerLastSeen`, and `leaseState` as before. With an ETag and
   * shared answers, as GET /api/keys.
   */
  app.get('/api/keys/detail', async (request, reply) => {
    const { key, limit } = decodeInput(KeyQuery, request.query, '(query)');
    const listed = detailList(limit);
    const now = ledger.now();
    const v = await ledger.version(now, UNSTARTED_WARNING_MS);
    // Holder states: the workers' liveness and expiries; workerLastSeen: their heartbeats; handoffs: the ledger.
    const tag = weakTag(['detail', key, listed, v.head, v.pending, v.projected, v.quarantined, v.beats, v.expired]);
    if (notModified(request, reply, tag)) return reply;
    const answer = await shared.of(tag, async () => {
      const detail = await ledger.keyDetail(key, now, listed);
      if (detail === null) return null;
      // A quarantined key's ledger does not read; the rest of its detail (the quarantine too) comes from the read models.
      const handoffs = detail.quarantine === null ? (await ledger.audit({ key }, readBudget())).handoffs : [];
      return { ...detail, handoffs: handoffs.slice(-RECENT_HANDOFFS).reverse() };
    });
    if (answer === null) throw new UnknownKeyError(key);
    return { now, ...answer };
  });

  app.post('/api/keys/release', async (request) => {
    const body = decodeInput(ReleaseBody, request.body, '(body)');
    return ledger.release({ key: body.key, by: operator(request, body.by), ...(body.jobId === undefined ? {} : { jobId: body.jobId }), ...(body.force === true ? { force: true } : {}) }, VIA);
  });

  app.post('/api/keys/discard', async (request) => {
    const body = decodeInput(DiscardBody, request.body, '(body)');
    return ledger.discard({ key: body.key, by: operator(request, body.by), ...(body.jobIds === undefined ? {} : { jobIds: body.jobIds }) }, VIA);
  });

  app.post('/api/keys/limit', async (request) => {
    const body = decodeInput(LimitBody, request.body, '(body)');
    return ledger.setLimit({ key: body.key, limit: body.limit, by: operator(request, body.by), ...(body.leaseMs === undefined ? {} : { leaseMs: body.leaseMs }) }, VIA);
  });

  const pauseInput = (request: FastifyRequest) => {
    const body = decodeInput(PauseBody, request.body, '(body)');
    return { key: body.key, by: operator(request, body.by), ...(body.reason === undefined ? {} : { reason: body.reason }) };
  };

  /** Nothing new is admitted on the key until resumed; holders finish. 409 when already paused. */
  app.post('/api/keys/pause', async (request) => ledger.pause(pauseInput(request), VIA));

  /** The key admits again: its free slots go to the parked jobs at once. 409 when it is not paused. */
  app.post('/api/keys/resume', async (request) => ledger.resume(pauseInput(request), VIA));
};

import type { FastifyInstance, FastifyRequest } from 'fastify';
import * as t from 'io-ts';
import { Reason } from '../../../domain/commands.js';
import { UnknownKeyError } from '../../../domain/errors.js';
import { Actor, JobId, Key, Limit } from '../../../domain/values.js';
import type { Ledger } from '../../ledger.js';
import { closedObject, decodeInput, operator, VIA } from '../input.js';

/** Recent handoffs shown with a key's detail; the whole history is GET /api/audit. */
export const RECENT_HANDOFFS = 50;

const KeyQuery = closedObject({ key: Key }, {});
const ReleaseBody = closedObject({ key: Key }, { jobId: JobId, by: Actor });
const DiscardBody = closedObject({ key: Key }, { jobIds: t.array(JobId), by: Actor });
const LimitBody = closedObject({ key: Key, limit: Limit }, { by: Actor });
const PauseBody = closedObject({ key: Key }, { by: Actor, reason: Reason });

export const registerKeyRoutes = (app: FastifyInstance, ledger: Ledger): void => {
  /** The cards' totals and one row per key. */
  app.get('/api/keys', async () => {
    const keys = await ledger.keys();
    const parkedAt = keys.flatMap((k) => (k.oldestParkedAt === null ? [] : [k.oldestParkedAt]));
    return {
      now: Date.now(),
      totals: {
        keys: keys.length,
        keysAtLimit: keys.filter((k) => k.atLimit).length,
        slotsHeld: keys.reduce((n, k) => n + k.inUse, 0),
        parked: keys.reduce((n, k) => n + k.parked, 0),
        scheduled: keys.reduce((n, k) => n + k.scheduled, 0),
        oldestParkedAt: parkedAt.length === 0 ? null : Math.min(...parkedAt),
      },
      keys,
    };
  });

  /** Holders, parked jobs in promotion order, scheduled jobs, and the latest handoffs (newest first). */
  app.get('/api/keys/detail', async (request) => {
    const { key } = decodeInput(KeyQuery, request.query, '(query)');
    const detail = await ledger.keyDetail(key);
    if (detail === null) throw new UnknownKeyError(key);
    // A quarantined key's ledger does not read; the rest of its detail (the quarantine too) comes from the read models.
    const handoffs = detail.quarantine === null ? (await ledger.audit({ key })).handoffs : [];
    return { now: Date.now(), ...detail, handoffs: handoffs.slice(-RECENT_HANDOFFS).reverse() };
  });

  app.post('/api/keys/release', async (request) => {
    const body = decodeInput(ReleaseBody, request.body, '(body)');
    return ledger.release({ key: body.key, by: operator(request, body.by), ...(body.jobId === undefined ? {} : { jobId: body.jobId }) }, VIA);
  });

  app.post('/api/keys/discard', async (request) => {
    const body = decodeInput(DiscardBody, request.body, '(body)');
    return ledger.discard({ key: body.key, by: operator(request, body.by), ...(body.jobIds === undefined ? {} : { jobIds: body.jobIds }) }, VIA);
  });

  app.post('/api/keys/limit', async (request) => {
    const body = decodeInput(LimitBody, request.body, '(body)');
    return ledger.setLimit({ key: body.key, limit: body.limit, by: operator(request, body.by) }, VIA);
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

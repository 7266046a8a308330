import type { FastifyInstance, FastifyRequest } from 'fastify';
import * as t from 'io-ts';
import { Reason } from '../../../domain/commands.js';
import { UnknownKeyError } from '../../../domain/errors.js';
import { Actor, JobId, Key, LeaseMs, Limit } from '../../../domain/values.js';
import type { Ledger } from '../../ledger.js';
import type { HolderCounts, KeyRow } from '../../postgres/queries/list-keys.js';
import type { QueueRow } from '../../postgres/queries/queues.js';
import { closedObject, decodeInput, operator, VIA } from '../input.js';

/** Recent handoffs shown with a key's detail; the whole history is GET /api/audit. */
export const RECENT_HANDOFFS = 50;

/**
 * A holder admitted and not started for longer than this is warned about: with a live worker on
 * its queue a start follows its admission within a poll (1 s by default), and a message read but
 * not started becomes visible again after 30 s (the workers' default visibility), so past that
 * nobody is taking it.
 */
export const UNSTARTED_WARNING_MS = 30_000;

/** What the overview warns of, with the figures a page needs to say it in its own words (`message`: in English). */
export type Warning =
  | { readonly kind: 'holders-unstarted'; readonly key: string; readonly count: number; readonly since: number; readonly message: string }
  | { readonly kind: 'holders-worker-gone'; readonly key: string; readonly count: number; readonly message: string }
  | { readonly kind: 'queue-without-consumer'; readonly queue: string; readonly depth: number; readonly oldestAgeMs: number | null; readonly message: string };

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/** Keys in key order, then queues in name order. */
export const warningsOf = (keys: readonly KeyRow[], queues: readonly QueueRow[], now: number): Warning[] => [
  ...keys.flatMap((k): Warning[] => [
    ...(k.oldestUnstartedAt !== null && now - k.oldestUnstartedAt > UNSTARTED_WARNING_MS
      ? [{ kind: 'holders-unstarted', key: k.key, count: k.holderStates.unstarted, since: k.oldestUnstartedAt, message: `${k.key}: ${plural(k.holderStates.unstarted, 'holder', 'holders')} admitted and not started, the oldest for ${Math.round((now - k.oldestUnstartedAt) / 1000)} s` } as const]
      : []),
    ...(k.holderStates.workerGone > 0
      ? [{ kind: 'holders-worker-gone', key: k.key, count: k.holderStates.workerGone, message: `${k.key}: ${plural(k.holderStates.workerGone, 'holder', 'holders')} whose worker is gone: nobody runs ${k.holderStates.workerGone === 1 ? 'it' : 'them'} until the sweeper reclaims the lease at its expiry` } as const]
      : []),
  ]),
  ...queues
    .filter((q) => q.depth > 0 && q.consumers === 0)
    .map((q): Warning => ({ kind: 'queue-without-consumer', queue: q.queue, depth: q.depth, oldestAgeMs: q.oldestAgeMs, message: `queue ${q.queue}: ${plural(q.depth, 'message', 'messages')} and no live worker reading it` })),
];

const sumCounts = (keys: readonly KeyRow[]): HolderCounts =>
  keys.reduce((n, { holderStates: c }) => ({ running: n.running + c.running, unstarted: n.unstarted + c.unstarted, expired: n.expired + c.expired, workerGone: n.workerGone + c.workerGone }), {
    running: 0,
    unstarted: 0,
    expired: 0,
    workerGone: 0,
  });

const KeyQuery = closedObject({ key: Key }, {});
const ReleaseBody = closedObject({ key: Key }, { jobId: JobId, by: Actor, force: t.boolean });
const DiscardBody = closedObject({ key: Key }, { jobIds: t.array(JobId), by: Actor });
const LimitBody = closedObject({ key: Key, limit: Limit }, { by: Actor, leaseMs: LeaseMs });
const PauseBody = closedObject({ key: Key }, { by: Actor, reason: Reason });

export const registerKeyRoutes = (app: FastifyInstance, ledger: Ledger): void => {
  /**
   * The cards' totals, the warnings and one row per key (KeyRow):
   * `{ now, totals: { keys, keysAtLimit, slotsHeld, parked, scheduled, oldestParkedAt,
   * holders: { running, unstarted, expired, workerGone }, workers: { live, gone },
   * ledger: { events, archivedEvents, bytes, archivedBytes } },
   * warnings: Warning[], keys: KeyRow[] }`. `slotsHeld` counts every holder whatever its state;
   * only `holders.running` are run by a live worker.
   */
  app.get('/api/keys', async () => {
    const [keys, queues, workers, size] = await Promise.all([ledger.keys(), ledger.queues(), ledger.workers(), ledger.ledgerSize()]);
    const now = ledger.now();
    const parkedAt = keys.flatMap((k) => (k.oldestParkedAt === null ? [] : [k.oldestParkedAt]));
    const live = workers.filter((w) => w.state === 'live').length;
    return {
      now,
      totals: {
        keys: keys.length,
        keysAtLimit: keys.filter((k) => k.atLimit).length,
        slotsHeld: keys.reduce((n, k) => n + k.inUse, 0),
        parked: keys.reduce((n, k) => n + k.parked, 0),
        scheduled: keys.reduce((n, k) => n + k.scheduled, 0),
        oldestParkedAt: parkedAt.length === 0 ? null : Math.min(...parkedAt),
        holders: sumCounts(keys),
        workers: { live, gone: workers.length - live },
        ledger: size,
      },
      warnings: warningsOf(keys, queues, now),
      keys,
    };
  });

  /**
   * Holders, parked jobs in promotion order, scheduled jobs, and the latest handoffs (newest
   * first): `{ now, ...KeyDetail, handoffs }`. Each holder has `state` (running, unstarted,
   * expired, worker-gone), `workerId`, `renewedAt` (its last renewal or start), `acquiredAt`
   * (unstarted since), `expiresAt`, `workerLastSeen`, and `leaseState` as before.
   */
  app.get('/api/keys/detail', async (request) => {
    const { key } = decodeInput(KeyQuery, request.query, '(query)');
    const detail = await ledger.keyDetail(key);
    if (detail === null) throw new UnknownKeyError(key);
    // A quarantined key's ledger does not read; the rest of its detail (the quarantine too) comes from the read models.
    const handoffs = detail.quarantine === null ? (await ledger.audit({ key })).handoffs : [];
    return { now: ledger.now(), ...detail, handoffs: handoffs.slice(-RECENT_HANDOFFS).reverse() };
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

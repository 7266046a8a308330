import type { LimitLine } from '../../src/domain/explain.js';

/**
 * A key's line as an explanation shows it, for comparing two reads of it (the read models' and the
 * state's): what each says, its holders in one order and their leases by the fields shown.
 */
export const shownLine = (l: Omit<LimitLine, 'startedAt'>) => ({
  limit: l.limit,
  holding: l.holding,
  paused: l.paused ?? null,
  place: l.place,
  ahead: l.ahead,
  holders: l.holders
    .map(({ jobId, home, lease: { leaseId, acquiredAt, expiresAt, workerId } }) => ({ jobId, home: home ?? null, leaseId, acquiredAt, expiresAt, workerId }))
    .sort((p, q) => (p.jobId < q.jobId ? -1 : 1)),
});

import type { FastifyInstance } from 'fastify';
import { JobId, Key, ValidationError } from '../../../domain/values.js';
import type { Ledger } from '../../ledger.js';
import { closedObject, decodeInput } from '../input.js';

const AuditQuery = closedObject({}, { key: Key, job: JobId });

export const registerAuditRoutes = (app: FastifyInstance, ledger: Ledger): void => {
  /**
   * Every slot handoff of a key (or of one job) and the events behind them (each in words too),
   * read from the ledger. On a limit key, the jobs of other keys under its limit hold slots as
   * well: their handoffs name their key (`home`).
   */
  app.get('/api/audit', async (request) => {
    const query = decodeInput(AuditQuery, request.query, '(query)');
    if ((query.key === undefined) === (query.job === undefined)) throw new ValidationError('key', 'give key=K or job=ID (one of them)');
    return ledger.audit(query.key !== undefined ? { key: query.key } : { jobId: query.job! });
  });
};

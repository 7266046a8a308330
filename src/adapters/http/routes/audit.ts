import type { FastifyInstance } from 'fastify';
import { JobId, Key, ValidationError } from '../../../domain/values.js';
import type { Ledger } from '../../ledger.js';
import { closedObject, decodeInput, IntegerString, type ReadBudgets } from '../input.js';

const AuditQuery = closedObject({}, { key: Key, job: JobId, before: IntegerString, limit: IntegerString });

export const registerAuditRoutes = (app: FastifyInstance, ledger: Ledger, readBudget: ReadBudgets): void => {
  /**
   * The slot handoffs of a key (or of one job) and the events behind them (each in words too),
   * read from the ledger. On a limit key, the jobs of other keys under its limit hold slots as
   * well: their handoffs name their key (`home`). A key's is a page, newest first: `limit` events
   * (AUDIT_PAGE by default) before revision `before`; `page.older` is the next page's `before`.
   * Read within READ_BUDGET_MS, else 503.
   */
  app.get('/api/audit', async (request) => {
    const query = decodeInput(AuditQuery, request.query, '(query)');
    if ((query.key === undefined) === (query.job === undefined)) throw new ValidationError('key', 'give key=K or job=ID (one of them)');
    if (query.job !== undefined && (query.before !== undefined || query.limit !== undefined)) throw new ValidationError(query.before !== undefined ? 'before' : 'limit', "pages a key's audit: a job's is whole");
    const { before, limit } = query;
    const target = query.key !== undefined ? { key: query.key, ...(before === undefined ? {} : { before }), ...(limit === undefined ? {} : { limit }) } : { jobId: query.job! };
    return ledger.audit(target, readBudget());
  });
};

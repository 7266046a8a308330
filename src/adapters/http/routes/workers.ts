import type { FastifyInstance } from 'fastify';
import type { LedgerReader } from '../../ledger-reader.js';
import { MAX_PAGE } from '../../postgres/queries/list-jobs.js';
import { notModified, weakTag } from '../etag.js';
import { closedObject, decodeInput } from '../input.js';
import { UNSTARTED_WARNING_MS } from './warnings.js';

// Who is doing the work: the workers' presence and the dispatch queues. Reads only (no token).
// Times are epoch ms on the database's clock; `seenAgoMs` and `oldestAgeMs` are measured by the
// database, so a page need not trust its own clock for them.

const NoQuery = closedObject({}, {});

/** Running jobs a worker's row names; the rest are counted. */
export const RUNNING_NAMED = 5;
/** Running jobs read, at most, a page of MAX_PAGE at a time: past them a worker's count is of those read. */
const RUNNING_READ = 10 * MAX_PAGE;

type RunningJob = { readonly jobId: string; readonly key: string | null };

/**
 * The jobs each worker runs now (jl_jobs status running, by the worker that started them), from
 * the job listing: its status filter reads the holders' partial index (jl_jobs_holders), so this
 * costs the jobs in flight, not the history.
 */
const runningByWorker = async (ledger: LedgerReader): Promise<Map<string, RunningJob[]>> => {
  const byWorker = new Map<string, RunningJob[]>();
  let cursor: string | undefined;
  for (let read = 0; read < RUNNING_READ; read += MAX_PAGE) {
    const page = await ledger.jobs({ status: 'running', limit: MAX_PAGE, ...(cursor === undefined ? {} : { cursor }) });
    for (const { jobId, key, workerId } of page.jobs) {
      if (workerId === null) continue;
      const jobs = byWorker.get(workerId) ?? [];
      if (jobs.length === 0) byWorker.set(workerId, jobs);
      jobs.push({ jobId, key });
    }
    if (page.nextCursor === null) break;
    cursor = page.nextCursor;
  }
  return byWorker;
};

export const registerWorkerRoutes = (app: FastifyInstance, ledger: LedgerReader): void => {
  /**
   * Every worker seen within the last day, live ones first:
   * `{ now, live, gone, workers: [{ id, host, pid, queue, concurrency, heartbeatMs, startedAt,
   * lastSeen, seenAgoMs, running, stoppedAt, state: 'live' | 'gone', holding, runningJobs,
   * runningJobCount }] }`. `running`: jobs it ran at its last heartbeat; `holding`: slots held now
   * under leases it started (a gone worker's are holders nobody runs); `runningJobs`: the first
   * RUNNING_NAMED jobs it runs now (`{ jobId, key }`, newest first), of `runningJobCount` (a gone
   * worker's: started by it, run by nobody now); `stoppedAt` null unless it stopped
   * gracefully (a killed worker is gone with stoppedAt null). With an ETag (src/adapters/http/etag.ts):
   * every heartbeat changes it, and so does a change of what they hold.
   */
  app.get('/api/workers', async (request, reply) => {
    decodeInput(NoQuery, request.query, '(query)');
    const now = ledger.now();
    const v = await ledger.version(now, UNSTARTED_WARNING_MS);
    if (notModified(request, reply, weakTag(['workers', v.head, v.pending, v.projected, v.beats]))) return reply;
    const [rows, running] = await Promise.all([ledger.workers(), runningByWorker(ledger)]);
    const workers = rows.map((w) => {
      const jobs = running.get(w.id) ?? [];
      return { ...w, runningJobs: jobs.slice(0, RUNNING_NAMED), runningJobCount: jobs.length };
    });
    const live = workers.filter((w) => w.state === 'live').length;
    return { now, live, gone: workers.length - live, workers };
  });

  /**
   * Every dispatch queue (with jobs holding a slot, or read by a live worker), by name:
   * `{ now, queues: [{ queue, depth, visibleNow, oldestAgeMs, consumers, capacity }] }`.
   * `depth`: its jobs holding a slot (waiting to be claimed or running); `visibleNow`: what a
   * read would claim now; `oldestAgeMs`: the age of the oldest admission waiting, `oldestAt`: when
   * it was made (null when none waits); `consumers`: live workers reading it; `capacity`: their
   * concurrency summed. With an ETag: the jobs in flight and the live workers' queues make it.
   */
  app.get('/api/queues', async (request, reply) => {
    decodeInput(NoQuery, request.query, '(query)');
    const now = ledger.now();
    const v = await ledger.version(now, UNSTARTED_WARNING_MS);
    if (notModified(request, reply, weakTag(['queues', v.head, v.pending, v.projected, v.presence]))) return reply;
    return { now, queues: await ledger.queues() };
  });
};

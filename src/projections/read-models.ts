import { isLedgerStream, ms, statement, type ProjectedEvent, type Projection, type Statement } from './projection.js';

/** The read models' projection name (projection_streams, projection_checkpoints). */
export const READ_MODELS = 'read_models';

/** The tables a rebuild of the read models empties (jl_key_stats is a view over them). */
export const READ_MODEL_TABLES = ['jl_jobs', 'jl_slots', 'jl_parked', 'jl_keys'] as const;

/**
 * The read models jl_jobs, jl_slots, jl_parked and jl_keys (schema and meaning: migration
 * 0003-read-models), as ONE projection with one checkpoint: jl_parked takes a job's priority and
 * enqueue order from jl_jobs (INSERT ... SELECT), which is only sound if both tables are at the
 * same point of the stream.
 *
 * The mapping follows src/domain/key-state.ts's evolve, event by event, so that after any whole
 * append jl_slots holds the state's holders, jl_parked its parked jobs and jl_jobs (status
 * 'scheduled') its scheduled ones. Unlike the state, jl_jobs keeps finished jobs (history).
 * Every statement keys on the job id, so one event is one statement (one round trip inline).
 */
export const createReadModelProjections = (): Projection => ({
  name: READ_MODELS,
  handles: isLedgerStream,
  project: projectReadModels,
  rebuild: { tables: READ_MODEL_TABLES },
});

/** Statuses that hold a slot; SlotReleased moves them to 'pending' (the append then records where the job goes). */
const HOLDING = `('holding', 'running')`;

export const projectReadModels = ({ event, stream, revision, key }: ProjectedEvent): readonly Statement[] => {
  const { at } = event.data;
  switch (event.type) {
    case 'KeyLimitSet': {
      // A job without a key gets a limit-1 stream of its own: not a key a dashboard lists.
      if (key === null) return [];
      const d = event.data;
      return [
        statement(
          `INSERT INTO jl_keys (stream, key, concurrency_limit, lease_ms, updated_at) VALUES ($1, $2, $3, $4, ${ms(5)})
           ON CONFLICT (stream) DO UPDATE SET concurrency_limit = excluded.concurrency_limit, lease_ms = excluded.lease_ms, updated_at = excluded.updated_at`,
          stream,
          key,
          d.limit,
          d.leaseMs,
          at,
        ),
      ];
    }
    case 'JobEnqueued': {
      const d = event.data;
      return [
        statement(
          `INSERT INTO jl_jobs (job_id, stream, key, seq, name, queue, args, priority, status, attempts, max_attempts, lease_ms, enqueued_at, updated_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, 'pending', 0, $9, $10, ${ms(11)}, ${ms(11)})`,
          d.jobId,
          stream,
          key,
          revision,
          d.name,
          d.queue,
          JSON.stringify(d.args ?? null),
          d.priority,
          d.maxAttempts,
          d.leaseMs,
          at,
        ),
      ];
    }
    case 'SlotAcquired':
    case 'JobPromoted': {
      const d = event.data;
      const how = event.type === 'SlotAcquired' ? 'acquired' : 'promoted';
      return [
        statement(
          `WITH parked AS (DELETE FROM jl_parked WHERE job_id = $1),
                job AS (UPDATE jl_jobs SET status = 'holding', lease_id = $2, run_at = NULL, updated_at = ${ms(4)} WHERE job_id = $1)
           INSERT INTO jl_slots (job_id, stream, key, lease_id, how, acquired_at, expires_at)
           VALUES ($1, $5, $6, $2, $7, ${ms(4)}, ${ms(3)})`,
          d.jobId,
          d.leaseId,
          d.expiresAt,
          at,
          stream,
          key,
          how,
        ),
      ];
    }
    case 'JobParked':
      return [
        statement(
          `WITH job AS (
             UPDATE jl_jobs SET status = 'parked', run_at = NULL, updated_at = ${ms(2)} WHERE job_id = $1
             RETURNING job_id, stream, key, priority, seq
           )
           INSERT INTO jl_parked (job_id, stream, key, priority, seq, parked_at)
           SELECT job_id, stream, key, priority, seq, ${ms(2)} FROM job`,
          event.data.jobId,
          at,
        ),
      ];
    case 'JobScheduled':
      return [
        statement(
          `UPDATE jl_jobs SET status = 'scheduled', run_at = ${ms(2)}, updated_at = ${ms(3)} WHERE job_id = $1`,
          event.data.jobId,
          event.data.runAt,
          at,
        ),
      ];
    case 'JobStarted': {
      const d = event.data;
      return [
        statement(
          `WITH slot AS (
             UPDATE jl_slots SET worker_id = $2, attempt = $3, started_at = ${ms(5)}, expires_at = ${ms(4)} WHERE job_id = $1
           )
           UPDATE jl_jobs SET status = 'running', attempts = $3, worker_id = $2, started_at = ${ms(5)}, updated_at = ${ms(5)}
           WHERE job_id = $1`,
          d.jobId,
          d.workerId,
          d.attempt,
          d.expiresAt,
          at,
        ),
      ];
    }
    case 'LeaseRenewed':
      return [statement(`UPDATE jl_slots SET expires_at = ${ms(2)} WHERE job_id = $1`, event.data.jobId, event.data.expiresAt)];
    case 'JobYielded':
      // The attempt is handed back only if the job was started under the lease it yields (evolve).
      return [
        statement(
          `UPDATE jl_jobs j SET attempts = j.attempts - 1, updated_at = ${ms(2)}
           FROM jl_slots s WHERE j.job_id = $1 AND s.job_id = $1 AND s.worker_id IS NOT NULL`,
          event.data.jobId,
          at,
        ),
      ];
    case 'SlotReleased':
      return [
        statement(
          `WITH slot AS (DELETE FROM jl_slots WHERE job_id = $1)
           UPDATE jl_jobs SET lease_id = NULL, status = CASE WHEN status IN ${HOLDING} THEN 'pending' ELSE status END, updated_at = ${ms(2)}
           WHERE job_id = $1`,
          event.data.jobId,
          at,
        ),
      ];
    case 'JobFailed':
      return [
        statement(`UPDATE jl_jobs SET last_error = $2, attempts = $3, updated_at = ${ms(4)} WHERE job_id = $1`, event.data.jobId, event.data.error, event.data.attempt, at),
      ];
    case 'JobCompleted':
      return finish(event.data.jobId, 'completed', null, at);
    case 'JobDead':
      return finish(event.data.jobId, 'dead', event.data.reason, at);
    case 'JobCancelled':
      return finish(event.data.jobId, 'cancelled', `cancelled by ${event.data.by}`, at);
    case 'ParkedDiscarded':
      return finish(event.data.jobId, 'discarded', `discarded by ${event.data.by}`, at);
    case 'LeaseExpired':
    case 'LeaseRevoked':
      // The SlotReleased that follows in the same append frees the slot and moves the job on.
      return [];
  }
};

/** A finished job leaves jl_parked; a holder keeps its slot until the SlotReleased that follows. */
const finish = (jobId: string, status: string, reason: string | null, at: number): readonly Statement[] => [
  statement(
    `WITH parked AS (DELETE FROM jl_parked WHERE job_id = $1)
     UPDATE jl_jobs SET status = $2, finish_reason = $3, run_at = NULL, finished_at = ${ms(4)}, updated_at = ${ms(4)} WHERE job_id = $1`,
    jobId,
    status,
    reason,
    at,
  ),
];

// The public API of jobledger.
export { createLedger, Ledger, type LedgerOptions } from './adapters/ledger.js';
export { PostgresEventStore } from './adapters/eventstore/postgres/postgres-event-store.js';
export { migrate } from './adapters/postgres/migrations.js';
export type { EnqueueInput, Enqueued, EnqueueStatus } from './commands/enqueue.js';
export { ConflictRetriesExhaustedError, type CommandResult, type KeyCommand } from './commands/key-command-handler.js';
export { EventDecodeError } from './commands/key-state-loader.js';
export { keyStateAt } from './commands/key-state-at.js';
export type { Command } from './domain/commands.js';
export { describeDomainError, type DomainError } from './domain/errors.js';
export type { KeyEvent } from './domain/events.js';
export { holders, jobsIn, parkedInOrder, type KeyState } from './domain/key-state.js';
export * from './domain/ports/event-store.js';
export { jobStream, keyStream } from './domain/streams.js';
export { ValidationError } from './domain/values.js';
export { defineJob, type JobContext, type JobDefinition, type JobHandler, type HandlerMap } from './adapters/worker/define-job.js';
export { Worker, type WorkerOptions } from './adapters/worker/worker.js';
export type { DispatchMessage } from './projections/dispatcher.js';
export { PgQueue } from './adapters/queue/pg-queue.js';

import type { EventStoreCapabilities } from '../../../domain/ports/event-store.js';

// What this adapter cannot do, said once: the flags the contract suite reads
// (test/contract/event-store.contract.ts); each refused operation throws the port's
// UnsupportedOperationError.

/**
 * What EventStoreDB/KurrentDB does not give the port, and so what of the ledger needs PostgreSQL:
 * - atomicMultiStreamAppend: an ESDB append is atomic within one stream only. appendMany over
 *   several streams is refused (the key writer's multi-key transactions — a job under several
 *   limit keys, a batch over many keys — and inline projections rest on PostgreSQL's transaction);
 *   appendMany over one stream is one atomic append.
 * - eventIdLookup: ESDB has no index by event id, so recordedEventIds is refused (enqueueing a
 *   given job id again is answered "duplicate" through it on PostgreSQL).
 */
export const EVENTSTOREDB_CAPABILITIES: EventStoreCapabilities = {
  atomicMultiStreamAppend: false,
  eventIdLookup: false,
};

// jobledger/eventstoredb: the event-store port on EventStoreDB/KurrentDB (DESIGN.md, "The event
// store on EventStoreDB"). A path of its own because @eventstore/db-client takes ~200 ms to load,
// which a user of the PostgreSQL ledger should not pay.
export { EventStoreDbEventStore } from './adapters/eventstore/eventstoredb/eventstoredb-event-store.js';
export { EVENTSTOREDB_CAPABILITIES } from './adapters/eventstore/eventstoredb/unsupported.js';
export { UnsupportedOperationError, type EventStoreCapabilities } from './domain/ports/event-store.js';

// Projections of the ledger: the read models (jl_*), the dispatcher (wake-ups, lost leases), applying
// them (inline statements, async runners, checkpoints), rebuild and verify. Ledger.open wires the read models and the dispatcher.
export { DISPATCHER, LEASE_LOST_CHANNEL, QUEUE_CHANNEL, createDispatcher, projectDispatch } from './dispatcher.js';
export { isLedgerStream, keyOfStream, statement, type ProjectedEvent, type Projection, type Statement } from './projection.js';
export { READ_MODELS, READ_MODEL_TABLES, createReadModelProjections, projectReadModels } from './read-models.js';
export { NotRebuildableError, ProjectionBusyError, rebuild, rebuildSpec, replayInto, type RebuildOptions, type Rebuilt } from './rebuild.js';
export { verify, type RowDifference, type Verified } from './verify.js';
export { applyBatch, applyEvents, applyStatements, projectAll, toProjected } from './apply.js';
export { loadCheckpoint, saveCheckpoint } from './checkpoint.js';
export { LeadershipLostError } from './leader.js';
export { AsyncProjectionRunner, type AsyncProjectionRunnerOptions } from './runner.js';

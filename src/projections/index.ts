// Projections of the ledger: the read models (jl_*), the dispatcher (queue messages), the runner
// (inline, async, apply), rebuild and verify. Ledger.open wires the read models and the dispatcher inline.
export { DISPATCHER, createDispatcher, projectDispatch, type DispatchMessage } from './dispatcher.js';
export { isLedgerStream, keyOfStream, statement, type ProjectedEvent, type Projection, type Statement } from './projection.js';
export { READ_MODELS, READ_MODEL_TABLES, createReadModelProjections, projectReadModels } from './read-models.js';
export { NotRebuildableError, ProjectionBusyError, rebuild, rebuildSpec, replayInto, type RebuildOptions, type Rebuilt } from './rebuild.js';
export { verify, type RowDifference, type Verified } from './verify.js';
export {
  AsyncProjectionRunner,
  LeadershipLostError,
  ProjectionGapError,
  ProjectionStatementError,
  applyBatch,
  applyEvents,
  applyProjections,
  inlineProjections,
  loadCheckpoint,
  saveCheckpoint,
  type Applied,
  type ApplyOptions,
  type AsyncProjectionRunnerOptions,
  type SendMessages,
} from './runner.js';

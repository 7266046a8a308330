import { createDispatcher } from './dispatcher.js';
import type { Projection } from './projection.js';
import { READ_MODELS, createReadModelProjections } from './read-models.js';

/** One projection of the ledger (named by projection.name), with the one whose checkpoint it never passes in async mode. */
export interface LedgerProjection {
  readonly projection: Projection;
  readonly follows?: string;
}

/**
 * The ledger's projections, in the order they apply: inline, in this order in each append's
 * transaction; async, one runner each, a follower never ahead of the one it follows. The one list
 * that Ledger.open (either mode) and `jobledger replay` read.
 */
export const ledgerProjections = (): readonly LedgerProjection[] => [
  { projection: createReadModelProjections() },
  // The dispatcher wakes readers of the jl_jobs rows the read models made claimable: it must come after them.
  { projection: createDispatcher(), follows: READ_MODELS },
];


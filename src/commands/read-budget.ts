// A time budget for a read of the ledger that may be long (a whole key's history, a job on a key
// of 100,000 events): past it the read stops with ReadBudgetError, which `serve` answers with 503,
// instead of holding a connection and the process's attention for minutes.

export interface ReadBudget {
  /** Epoch ms: past it, the read stops. */
  readonly deadline: number;
  readonly clock: () => number;
  /** The budget's length, for the error. */
  readonly ms: number;
}

export class ReadBudgetError extends Error {
  constructor(readonly budgetMs: number) {
    super(`the read took longer than its budget of ${budgetMs} ms: narrow it (a page of the audit, a moment closer to now), or read it with the CLI`);
    this.name = 'ReadBudgetError';
  }
}

export const budgetOf = (clock: () => number, ms: number): ReadBudget => ({ deadline: clock() + ms, clock, ms });

/** Throws ReadBudgetError once the budget is spent. */
export const checkBudget = (budget: ReadBudget | undefined): void => {
  if (budget !== undefined && budget.clock() >= budget.deadline) throw new ReadBudgetError(budget.ms);
};

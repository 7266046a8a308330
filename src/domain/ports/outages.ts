/**
 * Where the parts of a process report that the database did not answer, so an outage is one log
 * line when it begins and one when it ends, not a line per failed statement
 * (src/adapters/postgres/outage.ts).
 */
export interface Outages {
  /** Counts the outages that have ended: an operation notes it when it begins. */
  readonly generation: number;
  /**
   * Reports an error; true when it means the database is unreachable (retry later, quietly).
   * `since`: the generation when the failed operation began; an operation that began before the
   * last outage ended failed in that outage, and opens no new one.
   */
  failed(error: unknown, since?: number): boolean;
  /** The database answered. */
  answered(): void;
}

export const noOutages: Outages = { generation: 0, failed: () => false, answered: () => undefined };

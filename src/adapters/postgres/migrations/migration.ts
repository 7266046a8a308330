/** One schema change. Its own file, so each migration can name the type without importing the list that imports it. */
export interface Migration {
  /** Applied in increasing order; never renumber or edit one that has shipped, append a new one. */
  readonly version: number;
  readonly name: string;
  /** Runs inside a transaction, so no CREATE INDEX CONCURRENTLY and the like. */
  readonly sql: string;
}

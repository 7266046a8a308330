import type pg from 'pg';

// Where each stream lives on a distributed ledger (Citus, src/adapters/postgres/distribution.ts):
// the shard of `streams` (and of every table colocated with it) that holds the stream. A
// statement that locks rows (FOR UPDATE) must stay on one shard, and one that reads several
// streams' rows through LATERAL joins is planned by Citus only when it does: the write
// transaction groups its streams by shard and sends each group its own statements.
//
// A stream's shard is asked of the coordinator once (get_shard_id_for_distribution_column, by
// hash: no table is read) and kept. It changes only when Citus splits a shard (a rebalance moves
// shards between nodes, keeping their ids): a statement then finds its group on two shards and
// fails, and forget() makes the next attempt ask again.

/** The shards asked of the coordinator once kept; past this many, the oldest go first. */
const KEPT = 100_000;

export const SHARD_OF_SQL = `SELECT s AS stream, get_shard_id_for_distribution_column('streams', s)::text AS shard FROM unnest($1::text[]) AS s`;

export class ShardMap {
  private readonly shards = new Map<string, string>();

  /** The streams grouped by shard, each group sorted as given (a caller sorts them by name first), the groups in the order of their first stream. */
  async groups(db: Pick<pg.ClientBase, 'query'>, streams: readonly string[]): Promise<string[][]> {
    const unknown = [...new Set(streams.filter((s) => !this.shards.has(s)))];
    if (unknown.length > 0) {
      const { rows } = await db.query<{ stream: string; shard: string }>(SHARD_OF_SQL, [unknown]);
      for (const { stream, shard } of rows) this.keep(stream, shard);
    }
    const groups = new Map<string, string[]>();
    for (const stream of streams) {
      const shard = this.shards.get(stream)!;
      const group = groups.get(shard);
      if (group === undefined) groups.set(shard, [stream]);
      else group.push(stream);
    }
    return [...groups.values()];
  }

  /** Asks again for every stream: a shard was split. */
  forget(): void {
    this.shards.clear();
  }

  private keep(stream: string, shard: string): void {
    this.shards.set(stream, shard);
    if (this.shards.size > KEPT) this.shards.delete(this.shards.keys().next().value!);
  }
}

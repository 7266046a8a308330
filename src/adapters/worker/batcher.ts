/**
 * Group commit for the worker: an item added while the previous flush is in flight waits for the
 * next one, so an idle worker writes each item at once and a busy one writes many per
 * transaction. Each item gets its own result.
 */
export class Batcher<I, O> {
  private pending: { readonly item: I; readonly resolve: (o: O) => void; readonly reject: (e: unknown) => void }[] = [];
  private flushing: Promise<void> | undefined;

  constructor(
    private readonly flushItems: (items: readonly I[]) => Promise<readonly O[]>,
    private readonly maxBatch = 500,
  ) {}

  add(item: I): Promise<O> {
    const result = new Promise<O>((resolve, reject) => this.pending.push({ item, resolve, reject }));
    this.flushing ??= this.flush();
    return result;
  }

  /** Resolves once everything added so far is written. */
  async drain(): Promise<void> {
    while (this.flushing) await this.flushing;
  }

  private async flush(): Promise<void> {
    try {
      while (this.pending.length > 0) {
        const batch = this.pending.splice(0, this.maxBatch);
        try {
          const out = await this.flushItems(batch.map((b) => b.item));
          batch.forEach((b, i) => b.resolve(out[i] as O));
        } catch (error) {
          batch.forEach((b) => b.reject(error));
        }
      }
    } finally {
      this.flushing = undefined;
    }
  }
}

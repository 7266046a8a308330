// Polls that change nothing cost nothing, for every client at once: ten pages open on one ledger
// ask the same page of keys, or the same key, under the same ETag (src/adapters/http/etag.ts), and
// an answer read for one is the answer for all of them. What the tag promises (equal tags, equal
// answers but for the clock) is what a 304 relies on already; here it lets one read serve every
// request under its tag, and requests that arrive while it runs wait for it rather than read
// again. The answers are kept without their `now`, which each request gets as its own, so only
// routes whose answers hold no age measured from the clock share them (not /api/workers, whose
// seenAgoMs grows between heartbeats). A failed read is not kept.

/** The newest answers of the shared reads, by their tag; the least recently asked go first once there are `max`. */
export class SharedAnswers {
  private readonly answers = new Map<string, Promise<unknown>>();

  constructor(private readonly max: number = 32) {}

  /** The answer kept under `tag`, or `read`'s (kept under it once asked, and dropped if it fails). */
  of<T>(tag: string, read: () => Promise<T>): Promise<T> {
    const kept = this.answers.get(tag);
    if (kept !== undefined) {
      // Asked again: the most recently asked are the last to go.
      this.answers.delete(tag);
      this.answers.set(tag, kept);
      return kept as Promise<T>;
    }
    const answer = read();
    this.answers.set(tag, answer);
    answer.catch(() => {
      if (this.answers.get(tag) === answer) this.answers.delete(tag);
    });
    for (const oldest of this.answers.keys()) {
      if (this.answers.size <= this.max) break;
      this.answers.delete(oldest);
    }
    return answer;
  }
}

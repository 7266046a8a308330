// Polls that change nothing cost nothing, for every client at once: ten pages open on one ledger
// ask the same page of keys, or the same key, under the same ETag (src/adapters/http/etag.ts), and
// an answer read for one is the answer for all of them. What the tag promises (equal tags, equal
// answers but for the clock) is what a 304 relies on already; here it lets one read serve every
// request under its tag, and requests that arrive while it runs wait for it rather than read
// again. The answers are kept without their `now`, which each request gets as its own, so only
// routes whose answers hold no age measured from the clock share them (not /api/workers, whose
// seenAgoMs grows between heartbeats). A failed read is not kept.
//
// A ledger in use moves between any two polls, and then no two polls share a tag. With `freshMs`,
// the newest answer to a question (a page of keys, a key) also answers that question, under its
// own tag and without reading anything, while it is younger than freshMs: ten pages polling every
// 2 s then cost one read a question each freshMs, not one each poll. An answer may so be up to
// freshMs old, as seen by another process's writes; a write through this server is seen at once
// (forget(): the server calls it around each mutating request, and an answer read while one ran
// is not kept as fresh).

/** The newest answers of the shared reads, by their tag; the least recently asked go first once there are `max`. */
export class SharedAnswers {
  private readonly answers = new Map<string, Promise<unknown>>();
  /** The newest answer to each question, with its tag and when its read started. */
  private readonly newest = new Map<string, { readonly tag: string; readonly answer: Promise<unknown>; readonly at: number }>();
  /** Moved on by forget(): an answer whose read began before is not kept as fresh. */
  private generation = 0;

  constructor(
    private readonly max: number = 32,
    private readonly freshMs: number = 0,
    private readonly clock: () => number = () => performance.now(),
  ) {}

  /** The answer to `question` read less than freshMs ago, with the tag it was read under; undefined when there is none (or freshMs is 0). */
  fresh<T>(question: string): { readonly tag: string; readonly answer: Promise<T> } | undefined {
    const found = this.newest.get(question);
    if (found === undefined || this.clock() - found.at >= this.freshMs) return undefined;
    return found as { tag: string; answer: Promise<T> };
  }

  /** The answer kept under `tag`, or `read`'s (kept under it once asked, and dropped if it fails); with `question`, also the newest answer to it (see fresh). */
  of<T>(tag: string, read: () => Promise<T>, question?: string): Promise<T> {
    const kept = this.answers.get(tag);
    if (kept !== undefined) {
      // Asked again: the most recently asked are the last to go.
      this.answers.delete(tag);
      this.answers.set(tag, kept);
      return kept as Promise<T>;
    }
    const at = this.clock();
    const generation = this.generation;
    const answer = read();
    this.answers.set(tag, answer);
    answer.then(
      () => {
        if (question !== undefined && this.freshMs > 0 && generation === this.generation && (this.newest.get(question)?.at ?? -Infinity) <= at) {
          this.newest.delete(question);
          this.newest.set(question, { tag, answer, at });
          for (const oldest of this.newest.keys()) {
            if (this.newest.size <= this.max) break;
            this.newest.delete(oldest);
          }
        }
      },
      () => {
        if (this.answers.get(tag) === answer) this.answers.delete(tag);
      },
    );
    for (const oldest of this.answers.keys()) {
      if (this.answers.size <= this.max) break;
      this.answers.delete(oldest);
    }
    return answer;
  }

  /** No answer read so far answers as fresh: a write through this server is seen by the next poll. */
  forget(): void {
    this.generation++;
    this.newest.clear();
  }
}

// What the key writer's reads pass over (./flush-messages.ts, ./flush-attempt.ts).

/**
 * What this writer's reads pass over for a while: jobs it claimed and could not start, so that
 * every read does not claim them again at once. A job of a stream it could not read (quarantined)
 * waits for the stream to decode; one whose Start was refused (an async read model not yet at the
 * ledger) for the read model to catch up. Each is passed over until its time; expired ones go.
 */
export class PassOver {
  private readonly streams = new Map<string, number>();
  private readonly jobs = new Map<string, number>();

  stream(stream: string, until: number): void {
    this.streams.set(stream, until);
  }

  job(jobId: string, until: number): void {
    this.jobs.set(jobId, until);
  }

  /** The stream was read: its jobs are claimed again at once. */
  readable(stream: string): void {
    this.streams.delete(stream);
  }

  /** What to pass over now (and forget what is due again). */
  now(now: number): { readonly streams: string[]; readonly jobs: string[] } {
    return { streams: current(this.streams, now), jobs: current(this.jobs, now) };
  }
}

const current = (entries: Map<string, number>, now: number): string[] => {
  for (const [id, until] of entries) if (until <= now) entries.delete(id);
  return [...entries.keys()];
};

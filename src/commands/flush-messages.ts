import type { Command } from '../domain/commands.js';
import type { WriteTransaction } from '../domain/ports/ledger-store.js';
import type { Read, ReadItem } from './flush-context.js';

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

  /** What to pass over now (and forget what is due again). */
  now(now: number): { readonly streams: string[]; readonly jobs: string[] } {
    return { streams: current(this.streams, now), jobs: current(this.jobs, now) };
  }
}

const current = (entries: Map<string, number>, now: number): string[] => {
  for (const [id, until] of entries) if (until <= now) entries.delete(id);
  return [...entries.keys()];
};

/**
 * The reads of the flush: each claims admitted jobs of its queue (skipping the streams `busy`
 * names and what the writer passes over), each job a Start.
 */
export async function readMessages(tx: WriteTransaction, reads: readonly Read[], skip: { readonly streams: readonly string[]; readonly jobs: readonly string[] }): Promise<{ items: ReadItem[]; counts: Map<Read, number> }> {
  const items: ReadItem[] = [];
  const counts = new Map<Read, number>();
  const qty = new Map(reads.map((r) => [r, r.request.qty()]));
  const asked = reads.filter((r) => qty.get(r)! > 0);
  if (asked.length === 0) return { items, counts };
  const results = await tx.read(asked.map((r) => ({ queue: r.request.queue, qty: qty.get(r)!, skipStreams: skip.streams, skipJobs: skip.jobs })));
  asked.forEach((read, i) => {
    const claimed = results[i]!;
    counts.set(read, claimed.length);
    for (const message of claimed) {
      const command: Command = { type: 'Start', jobId: message.jobId, leaseId: message.leaseId, workerId: read.request.workerId };
      items.push({ stream: message.stream, command, metadata: { workerId: read.request.workerId, ...read.request.metadata }, read, message });
    }
  });
  return { items, counts };
}

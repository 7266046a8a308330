import type { Command } from '../domain/commands.js';
import type { WriteTransaction } from '../domain/ports/ledger-store.js';
import type { Read, ReadItem } from './flush-context.js';

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

import type { Command } from '../domain/commands.js';
import type { DispatchMessage, ReceivedMessage, WriteTransaction } from '../domain/ports/ledger-store.js';
import type { Logger } from '../domain/ports/logger.js';
import { streamFor } from '../domain/streams.js';
import type { Read, ReadItem } from './flush-context.js';

/** The reads of the flush, each message a Start (a malformed one is archived and logged). */
export async function readMessages(log: Logger, tx: WriteTransaction, reads: readonly Read[]): Promise<{ items: ReadItem[]; counts: Map<Read, number>; malformed: string[] }> {
  const items: ReadItem[] = [];
  const counts = new Map<Read, number>();
  const malformed: string[] = [];
  const qty = new Map(reads.map((r) => [r, r.request.qty()]));
  const asked = reads.filter((r) => qty.get(r)! > 0);
  if (asked.length === 0) return { items, counts, malformed };
  const results = await tx.read(asked.map((r) => ({ queue: r.request.queue, vtMs: r.request.vtMs, qty: qty.get(r)! })));
  asked.forEach((read, i) => {
    const messages = results[i]!;
    counts.set(read, messages.length);
    for (const m of messages) {
      const message = dispatchMessage(m);
      if (message === undefined) {
        log.error({ msgId: m.msgId, queue: read.request.queue }, 'dispatch message is not one: archived unread');
        malformed.push(m.msgId);
        continue;
      }
      const { jobId, leaseId, key } = message;
      const command: Command = { type: 'Start', jobId, leaseId, workerId: read.request.workerId, msgId: m.msgId };
      items.push({ stream: streamFor(key, jobId), command, metadata: { workerId: read.request.workerId, ...read.request.metadata }, read, msgId: m.msgId, message });
    }
  });
  return { items, counts, malformed };
}

const dispatchMessage = (m: ReceivedMessage): DispatchMessage | undefined => {
  const d = m.message as Partial<DispatchMessage> | null;
  const ok =
    typeof d === 'object' && d !== null && typeof d.jobId === 'string' && d.jobId !== '' && typeof d.leaseId === 'string' && d.leaseId !== '' &&
    (d.key === null || typeof d.key === 'string') && typeof d.name === 'string' && typeof d.attempt === 'number' && 'args' in d;
  return ok ? (d as DispatchMessage) : undefined;
};

import * as E from 'fp-ts/lib/Either.js';
import { PathReporter } from 'io-ts/lib/PathReporter.js';
import { KeyEventCodecs, type KeyEvent } from './events.js';
import type { GlobalPosition, RecordedEvent, StreamRevision } from './ports/event-store.js';
import { upcasters as ledgerUpcasters, type Upcasters } from './upcasters.js';

/** `commit/prepare` of a position, or why there is none. */
const positionText = (p: GlobalPosition | null): string => (p === null ? 'not yet written' : `${p.commit}/${p.prepare}`);

/**
 * An event in the store does not decode (an unknown type, a missing or ill-typed field, a schema
 * version this release cannot read): its stream cannot be folded, other streams are not affected.
 * It names where the event is, so an operator can look at it: its stream, revision and global
 * position (null for an event being appended, which has none yet).
 */
export class EventDecodeError extends Error {
  override readonly name = 'EventDecodeError';
  constructor(
    readonly stream: string,
    readonly revision: StreamRevision,
    readonly position: GlobalPosition | null,
    readonly problems: readonly string[],
  ) {
    super(`event at ${JSON.stringify(stream)} revision ${revision} (global position ${positionText(position)}) does not decode: ${problems.join('; ')}`);
  }
}

/** What decoding needs of a recorded event; `position` and `metadata` absent for an event being appended. */
export type Undecoded = Pick<RecordedEvent, 'stream' | 'revision' | 'type' | 'data'> & Partial<Pick<RecordedEvent, 'position' | 'metadata'>>;

/** The decoder of a set of upcasters: a recorded event as the key's event it must be (upcast from an older schema first), or EventDecodeError naming where it is. */
export const decoderOf =
  (upcasters: Upcasters) =>
  (e: Undecoded): KeyEvent => {
    const fail = (problems: readonly string[]) => new EventDecodeError(e.stream, e.revision, e.position ?? null, problems);
    const codec = KeyEventCodecs.get(e.type);
    if (codec === undefined) throw fail([`unknown event type ${JSON.stringify(e.type)}`]);
    const upcast = upcasters.upcast(e.type, e.data, e.metadata);
    if ('problem' in upcast) throw fail([upcast.problem]);
    const decoded = codec.decode({ type: e.type, data: upcast.data });
    if (E.isLeft(decoded)) throw fail(PathReporter.report(decoded).slice(0, 3));
    return decoded.right as KeyEvent;
  };

/** A recorded event as the key's event, read with the ledger's upcasters (src/domain/upcasters.ts). */
export const decodeRecorded: (e: Undecoded) => KeyEvent = decoderOf(ledgerUpcasters);

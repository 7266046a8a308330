import * as E from 'fp-ts/lib/Either.js';
import { PathReporter } from 'io-ts/lib/PathReporter.js';
import { KeyEventCodecs, type KeyEvent } from './events.js';
import type { RecordedEvent, StreamRevision } from './ports/event-store.js';

/** An event in the store does not decode: its stream cannot be folded (other streams are not affected). */
export class EventDecodeError extends Error {
  override readonly name = 'EventDecodeError';
  constructor(
    readonly stream: string,
    readonly revision: StreamRevision,
    readonly problems: readonly string[],
  ) {
    super(`event at ${JSON.stringify(stream)} revision ${revision} does not decode: ${problems.join('; ')}`);
  }
}

/** A recorded event as the key's event it must be, or EventDecodeError naming where it is. */
export const decodeRecorded = (e: RecordedEvent): KeyEvent => {
  const codec = KeyEventCodecs.get(e.type);
  if (codec === undefined) throw new EventDecodeError(e.stream, e.revision, [`unknown event type ${JSON.stringify(e.type)}`]);
  const decoded = codec.decode({ type: e.type, data: e.data });
  if (E.isLeft(decoded)) throw new EventDecodeError(e.stream, e.revision, PathReporter.report(decoded).slice(0, 3));
  return decoded.right as KeyEvent;
};

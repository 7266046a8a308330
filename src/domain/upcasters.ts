import type { JsonObject } from './ports/event-store.js';

// Versioned event schemas. An event type's shape may change in a later release; events written
// before stay as they were (the ledger is never rewritten) and are read as today's by upcasters:
// pure steps, each taking one type's data from version `from` to `from + 1`. decodeRecorded runs
// them before decoding, so every reader (the key writer, projections, replay, audit) sees one shape.
//
// An event's version is its metadata's EVENT_SCHEMA_KEY; absent, it is 1 (every event written so
// far: the changes in the repository's history — JobEnqueued.solo, JobStarted/LeaseRenewed/
// SlotReleased.msgId, JobYielded.attempts, a nullable SlotAcquired.expiresAt — only added optional
// fields or widened one, which today's codecs read as they are, so no upcaster is needed yet).
// The write path stamps the current version of a type only once it is past 1 (stampSchema), so
// today's events carry nothing extra.
//
// To change a shape: change the codec in events.ts and add a step here, e.g. when JobFailed's
// `error` became an object:
//   { type: 'JobFailed', from: 1, up: (d) => ({ ...d, error: { message: d.error } }) }
// From then on JobFailed's current version is 2, new events are stamped 2, and a version-1 event
// is decoded as { error: { message } }. Never edit a step that has shipped: add the next one.

export interface Upcaster {
  readonly type: string;
  /** The version it reads; it returns the data of version from + 1. */
  readonly from: number;
  readonly up: (data: JsonObject) => JsonObject;
}

/** The metadata field that holds an event's schema version (absent: 1). */
export const EVENT_SCHEMA_KEY = 'schema';

/** Every step shipped so far, by type and version (none yet: see above). */
export const UPCASTERS: readonly Upcaster[] = [];

export interface Upcasters {
  /** The version the code writes and decodes for a type. */
  current(type: string): number;
  /**
   * The data as the current version of its type, or a problem: a version newer than the code
   * (written by a later release) or one no step leads from.
   */
  upcast(type: string, data: JsonObject, metadata: JsonObject | undefined): { readonly data: JsonObject } | { readonly problem: string };
  /** The metadata to write with an event of this type: its version when past 1, and no caller's value for the key. */
  stamp(type: string, metadata: JsonObject): JsonObject;
}

export const createUpcasters = (steps: readonly Upcaster[]): Upcasters => {
  const byType = new Map<string, Map<number, Upcaster>>();
  for (const step of steps) {
    const mine = byType.get(step.type) ?? new Map<number, Upcaster>();
    if (mine.has(step.from)) throw new Error(`two upcasters of ${step.type} from version ${step.from}`);
    byType.set(step.type, mine.set(step.from, step));
  }
  const current = (type: string): number => 1 + (byType.get(type)?.size ?? 0);
  return {
    current,
    upcast: (type, data, metadata) => {
      const stored = metadata?.[EVENT_SCHEMA_KEY];
      let version = stored === undefined ? 1 : stored;
      if (typeof version !== 'number' || !Number.isInteger(version) || version < 1) return { problem: `schema version ${JSON.stringify(stored)} is not one` };
      const target = current(type);
      if (version > target) return { problem: `schema version ${version} is newer than this release reads (${target})` };
      let out = data;
      for (; version < target; version++) {
        const step = byType.get(type)?.get(version);
        if (step === undefined) return { problem: `no upcaster of ${type} from schema version ${version}` };
        out = step.up(out);
      }
      return { data: out };
    },
    stamp: (type, metadata) => {
      const version = current(type);
      if (version > 1) return { ...metadata, [EVENT_SCHEMA_KEY]: version };
      if (!(EVENT_SCHEMA_KEY in metadata)) return metadata;
      const { [EVENT_SCHEMA_KEY]: _dropped, ...rest } = metadata;
      return rest;
    },
  };
};

/** The ledger's upcasters. */
export const upcasters: Upcasters = createUpcasters(UPCASTERS);

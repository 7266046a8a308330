import { describe, expect, it } from 'vitest';
import { decoderOf, decodeRecorded, EventDecodeError } from '../../src/domain/recorded.js';
import { EVENT_SCHEMA_KEY, UPCASTERS, createUpcasters, upcasters } from '../../src/domain/upcasters.js';

// Versioned event schemas: an older shape of an event is read as today's. The ledger has shipped
// no shape change that needs a step yet (src/domain/upcasters.ts says why), so the mechanism is
// held to a synthetic history: JobFailed once had `message` where it has `error` today (version
// 1), then `error` as it is now (version 2), and a version 3 wrapped nothing new but was stamped.

const position = { commit: 7n, prepare: 42n };
const failedV1 = { jobId: 'j', leaseId: 'j:1', attempt: 1, message: 'boom', retryAt: null, at: 5 };
const failedNow = { jobId: 'j', leaseId: 'j:1', attempt: 1, error: 'boom', retryAt: null, at: 5 };

const history = createUpcasters([
  { type: 'JobFailed', from: 1, up: ({ message, ...rest }) => ({ ...rest, error: message }) },
  { type: 'JobFailed', from: 2, up: (d) => d },
]);
const decode = decoderOf(history);
const recorded = (data: object, metadata?: object) => ({ stream: 'key:u', revision: 3, position, type: 'JobFailed', data: data as never, ...(metadata ? { metadata: metadata as never } : {}) });

describe('upcasters', () => {
  it('an event without a schema version is version 1 and is upcast step by step to the current shape', () => {
    expect(history.current('JobFailed')).toBe(3);
    expect(decode(recorded(failedV1))).toEqual({ type: 'JobFailed', data: failedNow });
    expect(decode(recorded(failedNow, { [EVENT_SCHEMA_KEY]: 2 }))).toEqual({ type: 'JobFailed', data: failedNow });
    expect(decode(recorded(failedNow, { [EVENT_SCHEMA_KEY]: 3, by: 'x' }))).toEqual({ type: 'JobFailed', data: failedNow });
  });

  it('a version newer than the release, or not a version, is an EventDecodeError naming stream, revision and position', () => {
    for (const [v, problem] of [
      [4, 'schema version 4 is newer than this release reads (3)'],
      ['2', 'schema version "2" is not one'],
    ] as const) {
      let error: unknown;
      try {
        decode(recorded(failedNow, { [EVENT_SCHEMA_KEY]: v }));
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(EventDecodeError);
      expect(error).toMatchObject({ stream: 'key:u', revision: 3, position, problems: [problem] });
      expect((error as Error).message).toBe(`event at "key:u" revision 3 (global position 7/42) does not decode: ${problem}`);
    }
  });

  it('the write path stamps a type past version 1 with its version, and takes a caller\'s stamp off a type at version 1', () => {
    expect(history.stamp('JobFailed', { by: 'x' })).toEqual({ by: 'x', [EVENT_SCHEMA_KEY]: 3 });
    expect(history.stamp('JobFailed', { [EVENT_SCHEMA_KEY]: 1 })).toEqual({ [EVENT_SCHEMA_KEY]: 3 });
    const untouched = { by: 'x' };
    expect(history.stamp('JobCompleted', untouched)).toBe(untouched);
    expect(history.stamp('JobCompleted', { by: 'x', [EVENT_SCHEMA_KEY]: 9 })).toEqual({ by: 'x' });
  });

  it('two steps from the same version of a type are refused when the upcasters are made', () => {
    expect(() => createUpcasters([{ type: 'JobFailed', from: 1, up: (d) => d }, { type: 'JobFailed', from: 1, up: (d) => d }])).toThrow('two upcasters of JobFailed from version 1');
  });

  it("today's ledger: every type is at version 1 (no step shipped), so today's events carry no stamp and decode as they are", () => {
    expect(UPCASTERS).toEqual([]);
    expect(upcasters.current('JobFailed')).toBe(1);
    expect(decodeRecorded(recorded(failedNow))).toEqual({ type: 'JobFailed', data: failedNow });
    expect(() => decodeRecorded(recorded(failedV1))).toThrow(EventDecodeError);
  });
});

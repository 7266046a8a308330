// The behaviour every EventStore adapter must show. An adapter's *.int.test.ts calls
// eventStoreContract with a setup that gives a store; the store may be shared with other tests
// (as an EventStoreDB server is), so every case works in streams of its own prefix.
//
// A store may lack a capability (EventStoreCapabilities). It must then refuse the operation with
// an error named UnsupportedOperationError whose `operation` names it, writing nothing; the case
// that needs the capability is run as that check instead, and its name says so — a store's run
// never passes over a case without saying which and why.
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  comparePositions,
  DuplicateEventIdError,
  UnsupportedOperationError,
  WrongExpectedRevisionError,
  type EventStore,
  type EventStoreCapabilities,
  type EventToAppend,
  type ExpectedRevision,
  type RecordedEvent,
} from '../../src/domain/ports/event-store.js';
import { until } from '../support/until.js';

export interface EventStoreFixture {
  readonly store: EventStore;
  teardown(): Promise<void>;
  /**
   * Where the store has transactions: appends `event` to `stream` in a transaction left open,
   * so the event commits after later ones; resolves once it is written, to the function that
   * commits it. Teardown must end a transaction still open.
   */
  readonly holdOpenTransaction?: (stream: string, event: EventToAppend) => Promise<() => Promise<void>>;
}

export const ALL_CAPABILITIES: EventStoreCapabilities = { atomicMultiStreamAppend: true, eventIdLookup: true };

type WithEventId = EventToAppend & { readonly eventId: string };

const event = (type: string, data: Record<string, unknown> = {}, metadata?: Record<string, unknown>): WithEventId => ({
  type,
  data,
  eventId: randomUUID(),
  ...(metadata ? { metadata } : {}),
});

const uniquePrefix = (): string => `c${randomBytes(5).toString('hex')}-`;

/**
 * readAll only returns what no earlier event can precede any more, so on a shared server a
 * transaction open elsewhere may hold recent events back for a moment: read until `done` holds.
 */
async function readAllUntil(
  store: EventStore,
  options: Parameters<EventStore['readAll']>[0],
  done: (events: RecordedEvent[]) => boolean,
  timeoutMs = 10_000,
): Promise<RecordedEvent[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const events = await store.readAll(options);
    if (done(events) || Date.now() > deadline) return events;
    await sleep(20);
  }
}


async function conflict(promise: Promise<unknown>): Promise<WrongExpectedRevisionError> {
  const error = await promise.then(
    () => undefined,
    (rejection: unknown) => rejection,
  );
  expect(error).toBeInstanceOf(WrongExpectedRevisionError);
  return error as WrongExpectedRevisionError;
}

const ids = (events: readonly RecordedEvent[]): string[] => events.map((e) => e.eventId);

/** The refusal a store without the capability must give (each caller then checks that nothing was written). */
async function refused(promise: Promise<unknown>, operation: string): Promise<void> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(UnsupportedOperationError);
  expect(error).toMatchObject({ operation });
}

export function eventStoreContract(name: string, setup: () => Promise<EventStoreFixture>, capabilities: EventStoreCapabilities = ALL_CAPABILITIES): void {
  describe(`EventStore contract: ${name}`, () => {
    let fixture: EventStoreFixture;
    let store: EventStore;
    /** The case `title` when the store has `capability`, else the check that it refuses what the case needs. */
    const needs = (capability: keyof EventStoreCapabilities, title: string, run: () => Promise<void>, refusal: () => Promise<void>): void => {
      if (capabilities[capability]) it(title, run);
      else it(`${title} — not supported by ${name} (${capability}: false): refused with UnsupportedOperationError, nothing written`, refusal);
    };
    /** Several streams in one appendMany where the store can, else one append after the other (what its callers must do). */
    const appendAcross = async (appends: Parameters<EventStore['appendMany']>[0]): Promise<void> => {
      if (capabilities.atomicMultiStreamAppend) await store.appendMany(appends);
      else for (const a of appends) await store.append(a.stream, a.expected, a.events);
    };

    beforeAll(async () => {
      fixture = await setup();
      store = fixture.store;
    });
    afterAll(async () => {
      await fixture?.teardown();
    });

    it('appends with no_stream, an exact revision and any, and reads the events back intact and in order', async () => {
      const stream = `${uniquePrefix()}a`;
      const written = [
        event('Created', { n: 1, nested: { list: [1, 'two', null], flag: true } }, { by: 'test', correlation: 'x1' }),
        event('Changed', { n: 2 }),
        event('Changed', { n: 3, text: 'ünïcödé "quoted" \\ back' }),
        event('Closed'),
      ];

      const first = await store.append(stream, 'no_stream', written.slice(0, 2));
      const second = await store.append(stream, 1, [written[2]!]);
      const third = await store.append(stream, 'any', [written[3]!]);

      expect(first).toMatchObject({ stream, nextExpectedRevision: 1 });
      expect(second).toMatchObject({ stream, nextExpectedRevision: 2 });
      expect(third).toMatchObject({ stream, nextExpectedRevision: 3 });
      expect(typeof first.position.commit).toBe('bigint');
      expect(typeof first.position.prepare).toBe('bigint');
      expect(comparePositions(first.position, second.position)).toBeLessThan(0);
      expect(comparePositions(second.position, third.position)).toBeLessThan(0);

      const read = await store.readStream(stream);
      expect(read.map((e) => e.revision)).toEqual([0, 1, 2, 3]);
      read.forEach((recorded, i) => {
        expect(recorded).toMatchObject({
          stream,
          type: written[i]!.type,
          data: written[i]!.data,
          metadata: written[i]!.metadata ?? {},
          eventId: written[i]!.eventId,
        });
        expect(recorded.created).toBeInstanceOf(Date);
      });
      expect(read[1]!.position).toEqual(first.position);
      expect(read[2]!.position).toEqual(second.position);
      expect(read[3]!.position).toEqual(third.position);
    });

    it("creates a stream with 'any' and gives an event id when none is given", async () => {
      const stream = `${uniquePrefix()}any`;
      const result = await store.append(stream, 'any', [{ type: 'Anonymous', data: {} }]);
      expect(result.nextExpectedRevision).toBe(0);
      const [read] = await store.readStream(stream);
      expect(read?.eventId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    });

    it('returns no events for a stream that does not exist', async () => {
      expect(await store.readStream(`${uniquePrefix()}missing`)).toEqual([]);
    });

    it('refuses an append without events', async () => {
      await expect(store.append(`${uniquePrefix()}empty`, 'any', [])).rejects.toBeInstanceOf(RangeError);
    });

    it('refuses a wrong expected revision with the actual one and writes none of the events', async () => {
      const p = uniquePrefix();
      const stream = `${p}s`;
      const missing = `${p}missing`;
      const kept = [event('A'), event('B')];
      await store.append(stream, 'no_stream', kept);
      const rejected = [event('X'), event('Y'), event('Z')];

      const stale = await conflict(store.append(stream, 0, rejected));
      expect(stale).toMatchObject({ stream, expected: 0, actual: 1 });
      expect(await conflict(store.append(stream, 7, rejected))).toMatchObject({ stream, expected: 7, actual: 1 });
      expect(await conflict(store.append(stream, 'no_stream', rejected))).toMatchObject({
        stream,
        expected: 'no_stream',
        actual: 1,
      });
      expect(await conflict(store.append(missing, 0, rejected))).toMatchObject({
        stream: missing,
        expected: 0,
        actual: 'no_stream',
      });

      expect(ids(await store.readStream(stream))).toEqual(kept.map((e) => e.eventId));
      expect(await store.readStream(missing)).toEqual([]);
      const all = await readAllUntil(store, { streamPrefix: p }, (events) => events.length >= kept.length);
      expect(ids(all)).toEqual(kept.map((e) => e.eventId));
      // Nothing of the refused appends is left behind, not even a used event id.
      await store.append(stream, 1, rejected);
      expect(await store.readStream(stream)).toHaveLength(5);
    });

    needs('atomicMultiStreamAppend', 'appendMany writes several streams at once and answers in the order asked', async () => {
      const p = uniquePrefix();
      await store.append(`${p}b`, 'no_stream', [event('B0')]);
      const results = await store.appendMany([
        { stream: `${p}c`, expected: 'no_stream', events: [event('C0'), event('C1')] },
        { stream: `${p}b`, expected: 0, events: [event('B1')] },
        { stream: `${p}a`, expected: 'any', events: [event('A0')] },
      ]);
      expect(results.map((r) => [r.stream, r.nextExpectedRevision])).toEqual([
        [`${p}c`, 1],
        [`${p}b`, 1],
        [`${p}a`, 0],
      ]);
      for (const result of results) {
        const read = await store.readStream(result.stream);
        expect(read.at(-1)!.position).toEqual(result.position);
      }
      expect(await store.appendMany([])).toEqual([]);
    }, async () => {
      const p = uniquePrefix();
      await store.append(`${p}b`, 'no_stream', [event('B0')]);
      await refused(
        store.appendMany([
          { stream: `${p}c`, expected: 'no_stream', events: [event('C0'), event('C1')] },
          { stream: `${p}b`, expected: 0, events: [event('B1')] },
        ]),
        'appendMany',
      );
      expect(await store.readStream(`${p}c`)).toEqual([]);
      expect((await store.readStream(`${p}b`)).map((e) => e.type)).toEqual(['B0']);
      expect(await store.appendMany([])).toEqual([]);
    });

    it('appendMany naming one stream several times writes it in the order asked, each append expecting what the ones before wrote', async () => {
      const stream = `${uniquePrefix()}s`;
      const results = await store.appendMany([
        { stream, expected: 'no_stream', events: [event('A0'), event('A1')] },
        { stream, expected: 1, events: [event('A2')] },
        { stream, expected: 'any', events: [event('A3')] },
      ]);
      expect(results.map((r) => [r.stream, r.nextExpectedRevision])).toEqual([
        [stream, 1],
        [stream, 2],
        [stream, 3],
      ]);
      const read = await store.readStream(stream);
      expect(read.map((e) => e.type)).toEqual(['A0', 'A1', 'A2', 'A3']);
      expect(results.map((r) => r.position)).toEqual([read[1]!.position, read[2]!.position, read[3]!.position]);

      // The second expects what the stream was at before the first: refused, and neither is written.
      const error = await conflict(
        store.appendMany([
          { stream, expected: 3, events: [event('B0')] },
          { stream, expected: 3, events: [event('B1')] },
        ]),
      );
      expect(error).toMatchObject({ stream, expected: 3, actual: 4 });
      // Where the first is unchecked, a later one expecting what the stream cannot be at after it is named.
      expect(
        await conflict(
          store.appendMany([
            { stream, expected: 'any', events: [event('C0')] },
            { stream, expected: 0, events: [event('C1')] },
          ]),
        ),
      ).toMatchObject({ stream, expected: 0, actual: 4 });
      expect(await store.readStream(stream)).toHaveLength(4);
    });

    needs('atomicMultiStreamAppend', 'appendMany with one conflicting stream writes nothing to any stream and names that stream', async () => {
      const p = uniquePrefix();
      await store.append(`${p}a`, 'no_stream', [event('A0')]);
      await store.append(`${p}z`, 'no_stream', [event('Z0')]);
      // The conflicting stream sorts last, after the others could already have been written.
      const error = await conflict(
        store.appendMany([
          { stream: `${p}z`, expected: 3, events: [event('Z1')] },
          { stream: `${p}a`, expected: 0, events: [event('A1'), event('A2')] },
          { stream: `${p}m`, expected: 'no_stream', events: [event('M0')] },
        ]),
      );
      expect(error).toMatchObject({ stream: `${p}z`, expected: 3, actual: 0 });
      expect((await store.readStream(`${p}a`)).map((e) => e.type)).toEqual(['A0']);
      expect(await store.readStream(`${p}m`)).toEqual([]);
      expect((await store.readStream(`${p}z`)).map((e) => e.type)).toEqual(['Z0']);
    }, async () => {
      const p = uniquePrefix();
      await store.append(`${p}a`, 'no_stream', [event('A0')]);
      // Refused for spanning streams before any expected revision is looked at.
      await refused(
        store.appendMany([
          { stream: `${p}z`, expected: 3, events: [event('Z1')] },
          { stream: `${p}a`, expected: 0, events: [event('A1')] },
        ]),
        'appendMany',
      );
      expect((await store.readStream(`${p}a`)).map((e) => e.type)).toEqual(['A0']);
      expect(await store.readStream(`${p}z`)).toEqual([]);
    });

    needs('eventIdLookup', 'tells which of some event ids it holds', async () => {
      const stream = `${uniquePrefix()}s`;
      const held = [event('A'), event('B')];
      await store.append(stream, 'no_stream', held);
      const refused = event('Refused');
      await conflict(store.append(stream, 0, [refused]));
      const asked = [held[1]!.eventId, randomUUID(), refused.eventId, held[0]!.eventId.toUpperCase(), 'not-a-uuid'];
      expect(await store.recordedEventIds(asked)).toEqual(new Set([held[1]!.eventId, held[0]!.eventId.toUpperCase()]));
      expect(await store.recordedEventIds([])).toEqual(new Set());
    }, async () => {
      const held = event('A');
      await store.append(`${uniquePrefix()}s`, 'no_stream', [held]);
      await refused(store.recordedEventIds([held.eventId]), 'recordedEventIds');
    });

    needs('eventIdLookup', 'refuses an event id it holds already, on any stream, writing nothing of the append', async () => {
      const p = uniquePrefix();
      const held = event('A');
      await store.append(`${p}s`, 'no_stream', [held]);
      const fresh = event('B');
      const error = await store.append(`${p}t`, 'no_stream', [fresh, { ...event('C'), eventId: held.eventId }]).then(() => undefined, (e: unknown) => e);
      expect(error).toBeInstanceOf(DuplicateEventIdError);
      expect(await store.readStream(`${p}t`)).toEqual([]);
      expect(await store.recordedEventIds([fresh.eventId, held.eventId])).toEqual(new Set([held.eventId]));
    }, async () => {
      const held = event('A');
      await store.append(`${uniquePrefix()}s`, 'no_stream', [held]);
      await refused(store.recordedEventIds([held.eventId]), 'recordedEventIds');
    });

    it('readStream honours fromRevision and maxCount', async () => {
      const stream = `${uniquePrefix()}s`;
      await store.append(stream, 'no_stream', Array.from({ length: 10 }, (_, i) => event(`E${i}`)));
      const revisions = async (options: Parameters<EventStore['readStream']>[1]) =>
        (await store.readStream(stream, options)).map((e) => e.revision);
      expect(await revisions({ fromRevision: 3, maxCount: 4 })).toEqual([3, 4, 5, 6]);
      expect(await revisions({ fromRevision: 8 })).toEqual([8, 9]);
      expect(await revisions({ maxCount: 2 })).toEqual([0, 1]);
      expect(await revisions({ maxCount: 0 })).toEqual([]);
      expect(await revisions({ fromRevision: 10 })).toEqual([]);
    });

    it("keyStreamHead, where the store has it, is the revision of the stream's last event, or no_stream before its first", async () => {
      if (store.keyStreamHead === undefined) return;
      const stream = `${uniquePrefix()}s`;
      expect(await store.keyStreamHead(stream)).toBe('no_stream');
      await store.append(stream, 'no_stream', [event('E0')]);
      expect(await store.keyStreamHead(stream)).toBe(0);
      await store.append(stream, 0, Array.from({ length: 4 }, (_, i) => event(`E${i + 1}`)));
      expect(await store.keyStreamHead(stream)).toBe(4);
    });

    // Regression (issue 23): the PostgreSQL store once returned every event of each ledger row
    // naming a job and let the process pick the job's out; it picks them out in the database now.
    // Appends of several events (one row each), of several jobs and none, with their own metadata
    // or one for all: the events given are those the streams hold, filtered, field for field.
    it("readJobEvents, where the store has it, gives the streams' events naming the jobs, but for the types left out, as reading the streams would", async () => {
      if (store.readJobEvents === undefined) return;
      const JOBS = ['j0', 'j1', 'j2', 'j3'];
      const TYPES = ['JobEnqueued', 'JobParked', 'LeaseRenewed', 'SlotReleased'];
      const anEvent = fc.record({
        type: fc.constantFrom(...TYPES),
        jobId: fc.option(fc.constantFrom(...JOBS), { nil: undefined }),
        metadata: fc.option(fc.constantFrom({ by: 'alice' }, { by: 'bob' }), { nil: undefined }),
      });
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), fc.array(anEvent, { minLength: 1, maxLength: 6 })), { minLength: 1, maxLength: 6 }),
          fc.subarray(JOBS, { minLength: 1 }),
          fc.subarray(TYPES),
          fc.subarray([0, 1, 2, 3], { minLength: 1 }),
          async (appends, jobIds, except, asked) => {
            const p = uniquePrefix();
            const stream = (i: number) => `${p}key-${i}`;
            for (const [i, events] of appends) {
              await store.append(stream(i), 'any', events.map((e) => event(e.type, e.jobId === undefined ? { n: 1 } : { jobId: e.jobId }, e.metadata)));
            }
            const streams = asked.map(stream);
            const read = await store.readJobEvents!(jobIds, streams, { except });
            for (const s of streams) {
              const held = (await store.readStream(s)).filter((e) => jobIds.includes((e.data as { jobId?: string }).jobId ?? '') && !except.includes(e.type));
              expect(read.filter((e) => e.stream === s)).toEqual(held);
            }
            expect(read.every((e) => streams.includes(e.stream))).toBe(true);
          },
        ),
        { numRuns: 40, seed: 20261205 },
      );
    });

    it('readStreams reads several streams, each from its own revision, as readStream would', async () => {
      const p = uniquePrefix();
      for (let i = 0; i < 5; i++) await store.append(`${p}a`, 'any', [event(`A${i}`)]);
      for (let i = 0; i < 3; i++) await store.append(`${p}b`, 'any', [event(`B${i}`)]);
      const read = await store.readStreams([
        { stream: `${p}a`, fromRevision: 2 },
        { stream: `${p}b`, fromRevision: 0 },
        { stream: `${p}missing`, fromRevision: 0 },
        { stream: `${p}c`, fromRevision: 9 },
      ]);
      expect(read.get(`${p}a`)).toEqual(await store.readStream(`${p}a`, { fromRevision: 2 }));
      expect(read.get(`${p}b`)).toEqual(await store.readStream(`${p}b`));
      expect(read.get(`${p}missing`)).toEqual([]);
      expect(read.get(`${p}c`)).toEqual([]);
      expect(read.size).toBe(4);
      expect((await store.readStreams([])).size).toBe(0);
    });

    it('readAll filters by stream prefix and resumes strictly after a position', async () => {
      const p = uniquePrefix();
      const inside: string[] = [];
      for (let i = 0; i < 6; i++) {
        const e = event(`In${i}`);
        inside.push(e.eventId);
        await store.append(`${p}in-${i % 2}`, 'any', [e]);
        await store.append(`${p}out-${i % 2}`, 'any', [event(`Out${i}`)]);
      }
      const all = await readAllUntil(store, { streamPrefix: `${p}in-` }, (events) => events.length >= inside.length);
      expect(ids(all)).toEqual(inside);
      for (let i = 1; i < all.length; i++) expect(comparePositions(all[i - 1]!.position, all[i]!.position)).toBe(-1);

      expect(ids(await store.readAll({ streamPrefix: `${p}in-`, after: all[1]!.position }))).toEqual(inside.slice(2));
      expect(ids(await store.readAll({ streamPrefix: `${p}in-`, after: all[1]!.position, maxCount: 2 }))).toEqual(
        inside.slice(2, 4),
      );
      expect(await store.readAll({ streamPrefix: `${p}in-`, after: all.at(-1)!.position })).toEqual([]);
      // Without a prefix every stream counts.
      const mine = (events: RecordedEvent[]) => events.filter((e) => e.stream.startsWith(p));
      const rest = await readAllUntil(store, { after: all[0]!.position }, (events) => mine(events).length >= 11);
      expect(mine(rest).map((e) => e.type)).toEqual(['Out0', 'In1', 'Out1', 'In2', 'Out2', 'In3', 'Out3', 'In4', 'Out4', 'In5', 'Out5']);
    });

    it('lets exactly one of two writers racing on the same expected revision win', async () => {
      const p = uniquePrefix();
      for (let round = 0; round < 20; round++) {
        const stream = `${p}${round}`;
        const created = await Promise.allSettled([
          store.append(stream, 'no_stream', [event('First')]),
          store.append(stream, 'no_stream', [event('First')]),
        ]);
        expect(created.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
        const lost = created.find((r) => r.status === 'rejected')!;
        expect(lost.reason).toBeInstanceOf(WrongExpectedRevisionError);
        expect(lost.reason).toMatchObject({ expected: 'no_stream', actual: 0 });

        const next = await Promise.allSettled([
          store.append(stream, 0, [event('Second')]),
          store.append(stream, 0, [event('Second')]),
        ]);
        expect(next.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
        expect(next.find((r) => r.status === 'rejected')!.reason).toMatchObject({ expected: 0, actual: 1 });
        expect((await store.readStream(stream)).map((e) => e.revision)).toEqual([0, 1]);
      }
    });

    it('subscribe hands over events in global order from a position, and stops', async () => {
      const p = uniquePrefix();
      const before = await store.append(`${p}s`, 'no_stream', [event('Before')]);
      const seen: RecordedEvent[] = [];
      const subscription = store.subscribe({ streamPrefix: p, after: before.position, pollIntervalMs: 50 }, async (events) => {
        seen.push(...events);
      });
      const expected = [event('One'), event('Two'), event('Three')];
      await store.append(`${p}s`, 0, [expected[0]!]);
      await appendAcross([
        { stream: `${p}t`, expected: 'no_stream', events: [expected[1]!] },
        { stream: `${p}u`, expected: 'no_stream', events: [expected[2]!] },
      ]);
      await until(async () => seen.length, (n) => n >= 3, 'three events');
      await subscription.stop();
      await expect(subscription.done).resolves.toBeUndefined();
      expect(seen.map((e) => e.type)).toEqual(['One', 'Two', 'Three']);

      await store.append(`${p}s`, 1, [event('AfterStop')]);
      await sleep(200);
      expect(seen).toHaveLength(3);
    });

    it('ends a subscription whose handler throws: done rejects with the error', async () => {
      const p = uniquePrefix();
      const failure = new Error('handler failed');
      let calls = 0;
      const subscription = store.subscribe({ streamPrefix: p, pollIntervalMs: 50 }, async () => {
        calls++;
        throw failure;
      });
      await store.append(`${p}s`, 'no_stream', [event('Boom')]);
      await expect(subscription.done).rejects.toBe(failure);
      await store.append(`${p}s`, 0, [event('Ignored')]);
      await sleep(200);
      expect(calls).toBe(1);
      await subscription.stop();
    });

    it('delivers every event exactly once and in stream order to a subscriber while 8 writers race over 50 streams', async () => {
      const p = uniquePrefix();
      const WRITERS = 8;
      const APPENDS = 500;
      const streams = Array.from({ length: 50 }, (_, i) => `${p}s${i}`);
      const pick = (): string => streams[Math.floor(Math.random() * streams.length)]!;

      const seen: RecordedEvent[] = [];
      const subscription = store.subscribe({ streamPrefix: p, batchSize: 256, pollIntervalMs: 100 }, async (events) => {
        seen.push(...events);
      });

      // What the writers last learnt of each stream; stale entries cost a conflict and a retry.
      const known = new Map<string, ExpectedRevision>();
      const written = new Set<string>();
      let appended = 0;
      const milestones: { at: number; reached: () => void }[] = [];
      const reached = (at: number) => new Promise<void>((resolve) => milestones.push({ at, reached: resolve }));
      let conflicts = 0;

      const writer = async (w: number): Promise<void> => {
        for (let i = 0; i < APPENDS; i++) {
          // Every tenth append spans two streams, in one transaction (where the store has them).
          const targets = i % 10 === 9 && capabilities.atomicMultiStreamAppend ? [...new Set([pick(), pick()])] : [pick()];
          const events = new Map(targets.map((stream) => [stream, event('Tick', { w, i })]));
          for (;;) {
            const appends = targets.map((stream) => ({
              stream,
              expected: known.get(stream) ?? 'no_stream',
              events: [events.get(stream)!],
            }));
            try {
              const results =
                appends.length === 1
                  ? [await store.append(appends[0]!.stream, appends[0]!.expected, appends[0]!.events)]
                  : await store.appendMany(appends);
              for (const result of results) known.set(result.stream, result.nextExpectedRevision);
              break;
            } catch (error) {
              if (!(error instanceof WrongExpectedRevisionError)) throw error;
              conflicts++;
              known.set(error.stream, error.actual);
            }
          }
          for (const e of events.values()) written.add(e.eventId);
          appended++;
          for (const milestone of milestones) if (milestone.at === appended) milestone.reached();
        }
      };

      // An event whose transaction starts a quarter of the way in and commits halfway: the
      // subscriber must not have moved past it for good meanwhile.
      const holdOpen = async (): Promise<void> => {
        if (!fixture.holdOpenTransaction) return;
        const late = event('Late');
        const start = reached((WRITERS * APPENDS) / 4);
        const end = reached((WRITERS * APPENDS) / 2);
        await start;
        const commit = await fixture.holdOpenTransaction(`${p}late`, late);
        written.add(late.eventId);
        await end;
        await commit();
      };

      await Promise.all([holdOpen(), ...Array.from({ length: WRITERS }, (_, w) => writer(w))]);
      await until(async () => new Set(ids(seen)).size, (n) => n >= written.size, `all ${written.size} events`);
      await subscription.stop();

      expect(conflicts).toBeGreaterThan(0);
      expect(seen).toHaveLength(written.size);
      expect(new Set(ids(seen))).toEqual(written);
      for (let i = 1; i < seen.length; i++) expect(comparePositions(seen[i - 1]!.position, seen[i]!.position)).toBe(-1);
      const revisions = new Map<string, number[]>();
      for (const e of seen) revisions.set(e.stream, [...(revisions.get(e.stream) ?? []), e.revision]);
      for (const [stream, list] of revisions) {
        expect(list, stream).toEqual(list.map((_, i) => i));
      }
    });
  });
}

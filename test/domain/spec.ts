import * as E from 'fp-ts/lib/Either.js';
import { expect } from 'vitest';
import { decodeCommand, type Command, type JobSpec } from '../../src/domain/commands.js';
import { decide } from '../../src/domain/decide/index.js';
import type { DomainError } from '../../src/domain/errors.js';
import { mk, type EventData, type KeyEvent } from '../../src/domain/events.js';
import { fold, initialKeyState, type KeyState } from '../../src/domain/key-state.js';

// Given/when/then for the key decider (Emmett's DeciderSpecification, in a few lines): a spec
// reads as the key's history, the command, and the events it decides — or the refusal.

/** 03:00 UTC, 30 Nov 2026: specs speak of times as offsets from it. */
export const T0 = Date.UTC(2026, 10, 30, 3, 0, 0);
export const SEC = 1_000;
export const LEASE = 30 * SEC;

/**
 * Events without the line a wait records (JobParked, LimitWaiting: LineAtWait): specs state the
 * decision; that each line is the state just before its wait is the property "every wait records
 * its line as it stood" (invariants.unit.test.ts), over every history it generates.
 */
export const withoutLines = <E extends KeyEvent>(events: readonly E[]): E[] =>
  events.map((e) => {
    if (!('line' in e.data)) return e;
    const { line: _line, ...data } = e.data as typeof e.data & { line: unknown };
    return { ...e, data } as E;
  });

export const given = (...history: KeyEvent[]) => ({
  when: (command: Command, now = T0) => {
    // Specs only send commands that pass the codecs, like the command layer does.
    expect(decodeCommand(command)).toEqual(E.right(command));
    const state = fold(initialKeyState, history);
    const result = decide(command, state, now);
    return {
      then: (...expected: KeyEvent[]) => expect(E.map((es: readonly KeyEvent[]) => withoutLines(es))(result)).toEqual(E.right(withoutLines(expected))),
      thenNothing: () => expect(result).toEqual(E.right([])),
      thenRefused: (error: DomainError) => expect(result).toEqual(E.left(error)),
      /** The state after the decision, for specs that read it. */
      state: (): KeyState => fold(state, E.getOrElseW(() => [] as readonly KeyEvent[])(result)),
    };
  },
});

export const job = (jobId: string, overrides: Partial<JobSpec> = {}): JobSpec => ({
  jobId,
  name: 'sendEmail',
  args: { to: `${jobId}@example.com` },
  queue: 'default',
  priority: 0,
  maxAttempts: 3,
  runAt: null,
  ...overrides,
});

type Data<T extends KeyEvent['type']> = Omit<EventData<T>, 'at'>;
const ev =
  <T extends KeyEvent['type']>(type: T) =>
  (data: Data<T>, at = T0) =>
    mk(type, { ...data, at } as unknown as EventData<T>);

// Event builders with the defaults a spec would otherwise repeat.
export const limitSet = (limit: number, at = T0, by: string | null = null, leaseMs = LEASE) =>
  ev('KeyLimitSet')({ limit, leaseMs, by }, at);
export const enqueued = (spec: JobSpec, at = T0) => {
  const { limits, ...rest } = spec;
  return ev('JobEnqueued')({ ...rest, leaseMs: spec.leaseMs ?? LEASE, ...(limits !== undefined ? { limits: limits.map((l) => l.key) } : {}) }, at);
};
/** An admission: no expiry until a worker starts it. */
export const acquired = (jobId: string, leaseId: string, at = T0) => ev('SlotAcquired')({ jobId, leaseId, expiresAt: null }, at);
/** `line`: how the key stood, when a spec states it (else `then` leaves it out: see withoutLines). */
export const parked = (jobId: string, at = T0, line?: { limit: number; holding: number; paused: boolean }) => ev('JobParked')({ jobId, ...(line === undefined ? {} : { line }) }, at);
export const promoted = (jobId: string, leaseId: string, at: number, waitedMs: number) =>
  ev('JobPromoted')({ jobId, leaseId, expiresAt: null, waitedMs }, at);
export const scheduled = (jobId: string, runAt: number, at = T0) => ev('JobScheduled')({ jobId, runAt }, at);
export const started = (jobId: string, leaseId: string, at: number, attempt = 1, workerId = 'w1', leaseMs = LEASE, msgId?: string) =>
  ev('JobStarted')({ jobId, leaseId, workerId, attempt, expiresAt: at + leaseMs, ...(msgId === undefined ? {} : { msgId }) }, at);
export const renewed = (jobId: string, leaseId: string, at: number, leaseMs = LEASE, msgId?: string) =>
  ev('LeaseRenewed')({ jobId, leaseId, expiresAt: at + leaseMs, ...(msgId === undefined ? {} : { msgId }) }, at);
export const completed = (jobId: string, leaseId: string, at: number) => ev('JobCompleted')({ jobId, leaseId }, at);
export const failed = (jobId: string, leaseId: string, at: number, attempt: number, error: string, retryAt: number | null) =>
  ev('JobFailed')({ jobId, leaseId, attempt, error, retryAt }, at);
export const dead = (jobId: string, reason: string, at: number) => ev('JobDead')({ jobId, reason }, at);
export const expired = (jobId: string, leaseId: string, expiresAt: number, at: number) =>
  ev('LeaseExpired')({ jobId, leaseId, expiresAt }, at);
/** `cancel`: the revocation cancels the job (a cancel of a running job), rather than releasing it to be retried. */
export const revoked = (jobId: string, leaseId: string, by: string, at: number, cancel = false) => ev('LeaseRevoked')({ jobId, leaseId, by, ...(cancel ? { cancel: true as const } : {}) }, at);
export const released = (jobId: string, leaseId: string, reason: EventData<'SlotReleased'>['reason'], at: number, msgId?: string) =>
  ev('SlotReleased')({ jobId, leaseId, reason, ...(msgId === undefined ? {} : { msgId }) }, at);
/** `attempts`: the starts the job keeps after the yield. */
export const yielded = (jobId: string, leaseId: string, at: number, attempts: number) => ev('JobYielded')({ jobId, leaseId, attempts }, at);
export const cancelled = (jobId: string, by: string, at: number) => ev('JobCancelled')({ jobId, by }, at);
export const discarded = (jobId: string, by: string, at: number) => ev('ParkedDiscarded')({ jobId, by }, at);
export const paused = (by: string, reason: string | null, at = T0) => ev('KeyPaused')({ by, reason }, at);
export const resumed = (by: string, reason: string | null, at = T0) => ev('KeyResumed')({ by, reason }, at);
export const rejected = (jobId: string, reason: string, at = T0) => ev('JobRejected')({ jobId, reason }, at);
export const replaced = (jobId: string, by: string, at = T0) => ev('ParkedReplaced')({ jobId, by }, at);

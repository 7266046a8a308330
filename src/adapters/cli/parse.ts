import { isIP } from 'node:net';
import ms from 'ms';
import { UsageError } from './errors.js';

// Flag values as the CLI's user types them; each error names the flag. Light on purpose (commands
// register these parsers): a value checked by a domain codec is checked in the action.

/** "30s", "5m", "1500" (ms) -> milliseconds, at most `maxMs`. */
export const duration = (flag: string, maxMs = Number.POSITIVE_INFINITY) => (value: string): number => {
  // ms throws on an empty string instead of answering undefined.
  const parsed = value === '' ? undefined : /^\d+$/.test(value) ? Number(value) : ms(value as ms.StringValue);
  if (typeof parsed !== 'number' || !Number.isFinite(parsed) || parsed < 0) {
    throw new UsageError(`${flag}: "${value}" is not a duration (examples: 1500, 30s, 5m, 2h)`);
  }
  if (parsed > maxMs) throw new UsageError(`${flag}: "${value}" is longer than ${ms(maxMs)}`);
  return Math.round(parsed);
};

export const integer = (flag: string) => (value: string): number => {
  if (!/^-?\d+$/.test(value.trim())) throw new UsageError(`${flag}: "${value}" is not an integer`);
  const n = Number(value);
  // Past 2^53 a number is no longer the integer typed.
  if (!Number.isSafeInteger(n)) throw new UsageError(`${flag}: ${value.trim()} is out of range (-${Number.MAX_SAFE_INTEGER} to ${Number.MAX_SAFE_INTEGER})`);
  return n;
};

export const json = (flag: string) => (value: string): unknown => {
  try {
    return JSON.parse(value);
  } catch (error) {
    throw new UsageError(`${flag}: not valid JSON (${(error as Error).message})`);
  }
};

export const isoTime = (flag: string) => (value: string): Date => {
  const t = Date.parse(value);
  if (Number.isNaN(t)) throw new UsageError(`${flag}: "${value}" is not an ISO-8601 time (example: 2026-11-30T03:12:00Z)`);
  return new Date(t);
};

/** A repeatable flag: each value parsed on its own, in the order typed. */
export const each =
  <A>(parse: (value: string) => A) =>
  (value: string, previous: readonly A[] = []): A[] => [...previous, parse(value)];

/** "tenant:42=5" -> { key, limit }, "api:stripe" -> { key } (a key may hold "=": only a final "=<digits>" is a limit). */
export const limitKey = (flag: string) => (value: string): { key: string; limit?: number } => {
  const m = /^(.*)=(\d+)$/.exec(value);
  if (m === null) {
    if (value === '') throw new UsageError(`${flag}: give a limit key, optionally with its limit (examples: tenant:42, api:stripe=10)`);
    return { key: value };
  }
  return { key: m[1]!, limit: integer(flag)(m[2]!) };
};

/** "builds=3" -> ["builds", 3]: a queue and its cap. */
export const queueCap = (flag: string) => (value: string): readonly [string, number] => {
  const m = /^([^=]+)=(\d+)$/.exec(value.trim());
  if (m === null) throw new UsageError(`${flag}: "${value}" is not <queue>=<max running> (example: builds=3)`);
  return [m[1]!, integer(flag)(m[2]!)];
};

/**
 * The queue caps of --queue-cap flags, or else of JOBLEDGER_QUEUES ("builds=3,emails=10"); the
 * ledger checks each queue name and cap (and names the field when one is wrong).
 */
export const queueCaps = (flags: readonly (readonly [string, number])[] | undefined, env = process.env.JOBLEDGER_QUEUES): Record<string, { maxConcurrent: number }> | undefined => {
  const pairs = flags !== undefined && flags.length > 0 ? flags : env === undefined || env.trim() === '' ? [] : env.split(',').map(queueCap('JOBLEDGER_QUEUES'));
  return pairs.length === 0 ? undefined : Object.fromEntries(pairs.map(([queue, maxConcurrent]) => [queue, { maxConcurrent }]));
};

/** A host name (jobs.example.com) or an IP address (10.0.0.5, ::1, [::1]), without a port. */
export const hostName = (flag: string) => (value: string): string => {
  const bare = value.replace(/^\[(.*)\]$/, '$1');
  if (isIP(bare) === 0 && !/^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/.test(value)) {
    throw new UsageError(`${flag}: "${value}" is not a host name or an IP address (examples: jobs.example.com, 10.0.0.5, ::1)`);
  }
  return bare;
};

import ms from 'ms';
import { UsageError } from './errors.js';

// Flag values as the CLI's user types them; each error names the flag.

/** "30s", "5m", "1500" (ms) -> milliseconds. */
export const duration = (flag: string) => (value: string): number => {
  const parsed = /^\d+$/.test(value) ? Number(value) : ms(value as ms.StringValue);
  if (typeof parsed !== 'number' || !Number.isFinite(parsed) || parsed < 0) {
    throw new UsageError(`${flag}: "${value}" is not a duration (examples: 1500, 30s, 5m, 2h)`);
  }
  return Math.round(parsed);
};

export const integer = (flag: string) => (value: string): number => {
  if (!/^-?\d+$/.test(value.trim())) throw new UsageError(`${flag}: "${value}" is not an integer`);
  return Number(value);
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

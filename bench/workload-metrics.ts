// Figures from the handlers' execution records: a port of the shared peer benchmark's
// lib/metrics.mjs (same definitions, same rounding), so a figure measured here compares with one
// of its tables.
import fs from 'node:fs';
import type { Workload } from './workload-defs.js';

/** One handler execution. Times are process.hrtime.bigint(): CLOCK_MONOTONIC, one clock for every process on the machine. */
export interface ExecutionRecord {
  readonly seq: number;
  readonly key: string | null;
  readonly startNs: bigint;
  readonly endNs: bigint;
  readonly pid: number;
}

/** The record file's line: seq,key,startNs,endNs,pid (key empty for none). Keys are k<n>, hot<n>, cold<n>: no commas. */
export const recordLine = (r: ExecutionRecord): string => `${r.seq},${r.key ?? ''},${r.startNs},${r.endNs},${r.pid}`;

export const readRecords = (files: readonly string[]): ExecutionRecord[] => {
  const records: ExecutionRecord[] = [];
  for (const file of files) {
    if (!fs.existsSync(file)) continue; // a worker that died before its first write
    for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
      if (line === '') continue;
      const [seq = '', key = '', s = '0', e = '0', pid = ''] = line.split(',');
      records.push({ seq: Number(seq), key: key === '' ? null : key, startNs: BigInt(s), endNs: BigInt(e), pid: Number(pid) });
    }
  }
  return records;
};

/** Nearest-rank percentile of an ascending array (lib/metrics.mjs's pct). */
export const percentile = (sorted: readonly number[], q: number): number | null =>
  sorted.length === 0 ? null : (sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? null);

const ms = (ns: bigint): number => Number(ns) / 1e6;
const round = (x: number | null, digits = 3): number | null => (x === null ? null : Math.round(x * 10 ** digits) / 10 ** digits);

export interface Handoff {
  readonly count: number;
  readonly p50Ms: number | null;
  readonly p90Ms: number | null;
  readonly p99Ms: number | null;
  readonly maxMs: number | null;
  readonly minMs: number | null;
  /** Negative gaps: a job of a limit-1 key started before the previous one ended. */
  readonly overlaps: number;
}

export interface Metrics {
  readonly executions: number;
  readonly uniqueJobs: number;
  readonly duplicates: number;
  readonly duplicateSeqs: number[];
  readonly lost: number;
  readonly lostSeqs: number[];
  /** Records whose seq is not one of the run's jobs. */
  readonly unknownRecords: number;
  readonly enqueueMs: number | null;
  readonly enqueuePerSec: number | null;
  readonly firstStartAfterEnqueueStartMs: number | null;
  readonly processingMs: number | null;
  readonly processingJobsPerSec: number | null;
  readonly endToEndMs: number | null;
  readonly endToEndJobsPerSec: number | null;
  readonly executionsPerProcess: number[];
  readonly maxKeyConcurrency: number | null;
  readonly keyLimit: number | null;
  readonly keysOverLimit: number | null;
  readonly overAdmittedStarts: number | null;
  readonly worstKey: string | null;
  readonly handoff: Handoff | null;
}

interface Counted {
  readonly unique: number;
  readonly duplicates: number;
  readonly duplicateSeqs: number[];
  readonly lost: number;
  readonly lostSeqs: number[];
  readonly unknown: number;
}

/** Lost and duplicated executions, by seq. */
const countBySeq = (records: readonly ExecutionRecord[], jobs: number): Counted => {
  const seen = new Map<number, number>();
  let unknown = 0;
  for (const r of records) {
    if (!(r.seq >= 0 && r.seq < jobs)) unknown++;
    else seen.set(r.seq, (seen.get(r.seq) ?? 0) + 1);
  }
  const lostSeqs: number[] = [];
  for (let i = 0; i < jobs && lostSeqs.length < 20; i++) if (!seen.has(i)) lostSeqs.push(i);
  const duplicateSeqs = [...seen].filter(([, n]) => n > 1).map(([seq]) => seq);
  return { unique: seen.size, duplicates: records.length - unknown - seen.size, duplicateSeqs: duplicateSeqs.slice(0, 20), lost: jobs - seen.size, lostSeqs, unknown };
};

interface KeySweep {
  readonly max: number;
  /** Handler starts that found the key already at its limit. */
  readonly overStarts: number;
}

/** Most handlers of one key running at once, sweeping their [start, end] intervals; at one ns an end counts before a start. */
const sweepKey = (list: readonly ExecutionRecord[], limit: number): KeySweep => {
  const events: [bigint, 1 | -1][] = [];
  for (const r of list) events.push([r.startNs, 1], [r.endNs, -1]);
  events.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]));
  let running = 0;
  let max = 0;
  let overStarts = 0;
  for (const [, delta] of events) {
    running += delta;
    if (delta > 0 && running > limit) overStarts++;
    if (running > max) max = running;
  }
  return { max, overStarts };
};

/** Per key, jobs sorted by start: next start - previous end (ms). Only meaningful for limit 1. */
const handoffGaps = (list: readonly ExecutionRecord[]): number[] => {
  const sorted = [...list].sort((a, b) => (a.startNs < b.startNs ? -1 : a.startNs > b.startNs ? 1 : 0));
  const gaps: number[] = [];
  for (let i = 1; i < sorted.length; i++) gaps.push(ms(sorted[i]!.startNs - sorted[i - 1]!.endNs));
  return gaps;
};

const byKey = (records: readonly ExecutionRecord[]): Map<string, ExecutionRecord[]> => {
  const keys = new Map<string, ExecutionRecord[]>();
  for (const r of records) {
    if (r.key === null) continue;
    const list = keys.get(r.key);
    if (list) list.push(r);
    else keys.set(r.key, [r]);
  }
  return keys;
};

interface PerKey {
  readonly maxKeyConcurrency: number | null;
  readonly keysOverLimit: number | null;
  readonly overAdmittedStarts: number | null;
  readonly worstKey: string | null;
  readonly handoff: Handoff | null;
}

const perKeyFigures = (records: readonly ExecutionRecord[], w: Workload): PerKey => {
  if (w.keys === 0 || w.limit === null) return { maxKeyConcurrency: null, keysOverLimit: null, overAdmittedStarts: null, worstKey: null, handoff: null };
  let maxKeyConcurrency = 0;
  let keysOverLimit = 0;
  let overAdmittedStarts = 0;
  let worstKey: string | null = null;
  const gaps: number[] = [];
  for (const [key, list] of byKey(records)) {
    const { max, overStarts } = sweepKey(list, w.limit);
    if (max > maxKeyConcurrency) [maxKeyConcurrency, worstKey] = [max, key];
    if (max > w.limit) keysOverLimit++;
    overAdmittedStarts += overStarts;
    if (w.limit === 1) gaps.push(...handoffGaps(list));
  }
  gaps.sort((a, b) => a - b);
  const handoff: Handoff | null =
    w.limit === 1
      ? {
          count: gaps.length,
          p50Ms: round(percentile(gaps, 0.5)),
          p90Ms: round(percentile(gaps, 0.9)),
          p99Ms: round(percentile(gaps, 0.99)),
          maxMs: round(gaps.at(-1) ?? null),
          minMs: round(gaps[0] ?? null),
          overlaps: gaps.filter((g) => g < 0).length,
        }
      : null;
  return { maxKeyConcurrency, keysOverLimit, overAdmittedStarts, worstKey, handoff };
};

export const computeMetrics = (records: readonly ExecutionRecord[], w: Workload, enqueueStartNs: bigint, enqueueEndNs: bigint): Metrics => {
  const counted = countBySeq(records, w.jobs);
  let firstStart: bigint | null = null;
  let lastEnd: bigint | null = null;
  for (const r of records) {
    if (firstStart === null || r.startNs < firstStart) firstStart = r.startNs;
    if (lastEnd === null || r.endNs > lastEnd) lastEnd = r.endNs;
  }
  const processingMs = firstStart === null || lastEnd === null ? null : ms(lastEnd - firstStart);
  const endToEndMs = lastEnd === null ? null : ms(lastEnd - enqueueStartNs);
  const enqueueMs = ms(enqueueEndNs - enqueueStartNs);
  const perProcess = new Map<number, number>();
  for (const r of records) perProcess.set(r.pid, (perProcess.get(r.pid) ?? 0) + 1);
  // Throughputs count distinct jobs, not executions: a duplicate is not work done.
  const perSec = (spanMs: number | null): number | null => (spanMs ? round(counted.unique / (spanMs / 1000), 0) : null);
  return {
    executions: records.length,
    uniqueJobs: counted.unique,
    duplicates: counted.duplicates,
    duplicateSeqs: counted.duplicateSeqs,
    lost: counted.lost,
    lostSeqs: counted.lostSeqs,
    unknownRecords: counted.unknown,
    enqueueMs: round(enqueueMs),
    enqueuePerSec: round(w.jobs / (enqueueMs / 1000), 0),
    firstStartAfterEnqueueStartMs: firstStart === null ? null : round(ms(firstStart - enqueueStartNs)),
    processingMs: round(processingMs),
    processingJobsPerSec: perSec(processingMs),
    endToEndMs: round(endToEndMs),
    endToEndJobsPerSec: perSec(endToEndMs),
    executionsPerProcess: [...perProcess.values()],
    keyLimit: w.limit,
    ...perKeyFigures(records, w),
  };
};

import { jobName } from './audit.js';
import type { Explanation, HolderView, LeaseView, LimitView, Wait } from './explain.js';

// An Explanation (src/domain/explain.ts) in plain English, a line per fact, for the CLI.

const iso = (at: number): string => new Date(at).toISOString();

/** 850 ms, 12.5 s, 3.2 min, 1.5 h */
export const duration = (ms: number): string =>
  ms < 1_000 ? `${ms} ms` : ms < 60_000 ? `${Math.round(ms / 100) / 10} s` : ms < 3_600_000 ? `${Math.round(ms / 6_000) / 10} min` : `${Math.round(ms / 360_000) / 10} h`;

const ago = (x: Explanation, at: number): string => `${iso(at)}, ${duration(Math.max(0, x.asOf - at))} before`;

export const leaseInWords = (x: Explanation, l: LeaseView): string => {
  switch (l.state) {
    case 'running':
      return `running on worker ${l.workerId}${l.startedAt === null ? '' : ` since ${iso(l.startedAt)}`}, lease expiring at ${iso(l.expiresAt!)}`;
    case 'unstarted':
      return `admitted at ${ago(x, l.heldSince)}, not started by any worker since`;
    case 'expired':
      return `lease expired at ${iso(l.expiresAt!)} (worker ${l.workerId} went silent; the sweeper takes the slot back)`;
    case 'worker-gone':
      return `started by worker ${l.workerId}, which no longer beats: nobody runs it until its lease expires at ${iso(l.expiresAt!)}`;
    case 'home':
      return `holding since ${iso(l.heldSince)} (its lease is kept on its own key)`;
  }
};

const holderLine = (x: Explanation, h: HolderView): string => `  - ${jobName(h.jobId, h.home)}: ${leaseInWords(x, h.lease)}`;

const limitLines = (x: Explanation, l: LimitView): string[] => {
  const name = l.own ? `its key ${l.key}` : `its limit key ${l.key}`;
  const state = l.paused !== null ? `is paused by ${l.paused.by}${l.paused.reason === null ? '' : ` (${l.paused.reason})`} since ${iso(l.paused.since)}` : l.holding >= l.limit ? `is full (${l.holding} of ${l.limit} slots held)` : `has a free slot (${l.holding} of ${l.limit} held)`;
  const place = l.place === null ? '' : `; it is ${l.place.n} of ${l.place.of} in line${l.ahead.length === 0 ? '' : ` (ahead: ${l.ahead.join(', ')}${l.place.n - 1 > l.ahead.length ? ', …' : ''})`}`;
  return [`${name} ${state}${place}`, ...(l.holders.length === 0 ? [] : [`  held by:`, ...l.holders.map((h) => holderLine(x, h))])];
};

const waitLine = (w: Wait): string => {
  const span = `${iso(w.from)} ${w.until === null ? 'until now' : `to ${iso(w.until)}`} (${duration(w.ms)})`;
  if (w.kind === 'scheduled') return `  - scheduled for ${iso(w.runAt)}: ${w.why}; ${span}`;
  const on = w.on.length === 0 ? 'behind jobs ahead of it in line' : `on ${w.on.map((o) => `${o.key} (${o.why})`).join(', ')}`;
  return `  - parked ${on}; ${span}`;
};

export const explanationInWords = (x: Explanation): string => {
  const lines: string[] = [];
  const who = `job ${x.jobId} (key ${x.key})`;
  const attempts = x.attempts === null ? '' : `, ${x.attempts} of ${x.maxAttempts} attempts used`;
  switch (x.status) {
    case 'unknown':
      lines.push(`${who} was not enqueued yet at ${iso(x.asOf)}`);
      break;
    case 'parked': {
      lines.push(`${who} is parked, waiting for a slot${attempts}`);
      const blocking = x.limits.filter((l) => l.blocking);
      lines.push(blocking.length === 0 ? 'no limit of it is full or paused: it waits for jobs ahead of it in line to go first' : `it waits on ${blocking.map((l) => l.key).join(' and ')}`);
      for (const l of x.limits) lines.push(...limitLines(x, l));
      break;
    }
    case 'scheduled':
      lines.push(`${who} is scheduled for ${iso(x.schedule!.runAt)}${x.schedule!.due ? ' (due: the sweeper admits it on its next run)' : ''}, holding no slot${attempts}`);
      lines.push(`why: ${x.schedule!.why}`);
      break;
    case 'holding':
    case 'running':
      lines.push(`${who} holds a slot${attempts}: ${x.holding!.how === 'promoted' ? `promoted after ${duration(x.holding!.waitedMs)} parked` : 'admitted at once'}`);
      lines.push(leaseInWords(x, x.holding!.lease));
      break;
    default: {
      const e = x.ended!;
      const why = [e.reason, e.by === null ? null : `by ${e.by}`].filter(Boolean).join(' ');
      lines.push(`${who} ${x.status === 'completed' ? 'completed' : `is ${x.status}`} at ${iso(e.at)}${why === '' ? '' : `: ${why}`}`);
      if (e.lastError !== null) lines.push(`last error: ${e.lastError}`);
    }
  }
  if (x.waits.length > 0) {
    lines.push(`it waited ${duration(x.waited.parkedMs)} parked and ${duration(x.waited.scheduledMs)} scheduled:`);
    lines.push(...x.waits.map(waitLine));
  }
  return lines.join('\n');
};

// A job's own view (#job=ID): where it is and why (GET /api/jobs/explain: its place in each
// line, the holders ahead with their leases, the limits it waits on, a pause, a schedule; for a
// finished job how long it waited for what), now or as of a past moment, and its events across
// streams in the ledger's order with who and why (GET /api/jobs/history).

import { $, el, getJson, jobLink, keyLink, known, orMissing, t, tr } from './ui.js';

/** The moment asked for (epoch ms), or null for now. */
let asOf = null;

/** Every renewal on a line of its own (asked for on the page), or each run of renewals in one line. */
let allRenewals = false;

/** Reads and draws the page again (given by wireJobView). */
let refreshView = () => {};

const homeKey = (key) => (key.startsWith('job:') ? null : key);

/** The job's history and explanation; null when the server does not know the job (404). */
export const readJob = (jobId) =>
  orMissing(async () => {
    const [history, explanation] = await Promise.all([getJson('/api/jobs/history', { jobId, renewals: allRenewals ? 'all' : undefined }), getJson('/api/jobs/explain', { jobId, at: asOf === null ? undefined : String(asOf) })]);
    return { key: homeKey(history.key), history, explanation };
  });

// ---- why ----------------------------------------------------------------------

/** Why the job was scheduled (the explanation's `because`), in the page's language. */
const because = (b) => {
  switch (b.kind) {
    case 'failed':
      return t('because.failed', { attempt: b.attempt, error: b.error });
    case 'yielded':
      return b.reason === null ? t('because.yielded') : t('because.yieldedReason', { reason: b.reason });
    case 'revoked':
      return t('because.revoked', { by: b.by });
    default:
      return t(b.kind === 'expired' ? 'because.expired' : 'because.runAt');
  }
};

/**
 * A lease as the explanation gives it, in the holder words of the rest of the page. Explaining
 * now, the server calls a started lease whose worker no longer beats worker-gone; the page's own
 * latest /api/workers says so too for one the server still saw running. As of a past moment,
 * presence then is not known: running is all it can say.
 */
const leaseText = (lease, at, workers) => {
  switch (lease.state) {
    case 'running':
    case 'worker-gone': {
      const worker = workers.find((w) => w.id === lease.workerId);
      if (lease.state === 'running' && (asOf !== null || worker?.state === 'live')) return t('holder.runningOn', { worker: lease.workerId });
      return worker ? t('holder.workerGone', { worker: lease.workerId, ago: t('time.ago', { duration: tr.duration(worker.seenAgoMs) }) }) : t('holder.workerGoneNever', { worker: lease.workerId });
    }
    case 'unstarted':
      return t('holder.unstarted', { duration: tr.duration(at - lease.heldSince) });
    case 'expired':
      return t('holder.expired', { ago: t('time.ago', { duration: tr.duration(at - lease.expiresAt) }) });
    case 'home':
      return t('holder.home');
    default:
      return lease.state;
  }
};

const holderItem = (h, at, workers) =>
  el('li', { dataset: { job: h.jobId } }, jobLink(h.jobId), h.home === null ? null : el('span', { className: 'from-key' }, tr.parts('guest.fromKey', { key: keyLink(h.home) })), ' ', el('span', { className: `badge holder-${h.lease.state}` }, leaseText(h.lease, at, workers)));

const limitBlock = (l, x, workers) =>
  el(
    'li',
    { className: 'limit-why', dataset: { key: l.key } },
    el(
      'p',
      {},
      tr.parts(l.own ? 'why.ownKey' : 'why.limitKey', { key: keyLink(l.key), holding: l.holding, limit: l.limit }),
      l.blocking && l.paused === null ? el('span', { className: 'badge at-limit-badge' }, t('badge.full')) : null,
    ),
    l.place === null ? null : el('p', { className: 'place' }, t('why.place', { n: l.place.n, of: l.place.of })),
    l.paused === null ? null : el('p', { className: 'warning' }, t(l.paused.reason ? 'why.pausedReason' : 'why.paused', { by: l.paused.by, when: tr.clock(l.paused.since), reason: l.paused.reason ?? '' })),
    l.ahead.length === 0 ? null : el('p', { className: 'ahead' }, t('why.ahead', { count: l.place === null ? l.ahead.length : l.place.n - 1 }), ' ', l.ahead.flatMap((id, i) => [i > 0 ? ', ' : null, jobLink(id)])),
    l.holders.length === 0 ? el('p', { className: 'hint' }, t('why.noHolders')) : [el('p', { className: 'hint' }, t('why.holders')), el('ul', { className: 'holders-why' }, l.holders.map((h) => holderItem(h, x.asOf, workers)))],
  );

const waitText = (w) => {
  const span = { duration: tr.duration(w.ms), from: tr.clock(w.from), to: w.until === null ? t('handoff.now') : tr.clock(w.until) };
  if (w.kind === 'scheduled') return t('why.waitScheduled', { ...span, why: because(w.because) });
  const on = w.on.map((o) => t(o.why === 'paused' ? 'waitsOn.paused' : 'why.onFull', { key: o.key })).join(', ');
  return on === '' ? t('why.waitParked', span) : t('why.waitParkedOn', { ...span, on });
};

/** What the job is doing as of the explanation's moment, in a sentence or two. */
const standing = (x, workers) => {
  if (x.status === 'unknown') return [t('why.unknown')];
  const lines = [];
  if (x.schedule !== null) lines.push(t(x.schedule.due ? 'why.due' : 'why.scheduled', { time: tr.clock(x.schedule.runAt), why: because(x.schedule.because) }));
  if (x.holding !== null)
    lines.push(
      t(x.holding.how === 'promoted' ? 'why.holdingPromoted' : 'why.holdingAcquired', { since: tr.clock(x.holding.lease.heldSince), waited: tr.duration(x.holding.waitedMs) }),
      leaseText(x.holding.lease, x.asOf, workers),
    );
  if (x.ended !== null) {
    lines.push(t(x.ended.by ? 'why.endedBy' : 'why.ended', { status: known('jobStatus', x.status), when: tr.clock(x.ended.at), by: x.ended.by ?? '' }));
    if (x.ended.reason) lines.push(x.ended.reason);
  }
  if (x.status === 'parked') lines.push(x.limits.some((l) => l.blocking) ? t('why.parkedBlocked') : t('why.parkedFree'));
  return lines;
};

const renderWhy = (x, workers) => {
  $('job-as-of').textContent = asOf === null ? t('why.asOfNow') : t('why.asOf', { time: tr.clock(x.asOf) });
  $('job-standing').replaceChildren(...standing(x, workers).map((line) => el('p', {}, line)));
  // A finished job's lines are gone; while it waits or holds, each of its keys says how it stands.
  const limits = x.ended === null && x.status !== 'unknown' ? x.limits : [];
  $('job-limits').replaceChildren(...limits.map((l) => limitBlock(l, x, workers)));
  $('job-waits').replaceChildren(...x.waits.map((w) => el('li', { className: `wait wait-${w.kind}` }, waitText(w))));
  $('job-waits-empty').hidden = x.waits.length > 0;
  $('job-waited').textContent = t('why.waited', { parked: tr.duration(x.waited.parkedMs), scheduled: tr.duration(x.waited.scheduledMs) });
};

// ---- events -------------------------------------------------------------------

const eventItem = (e, home) =>
  el(
    'li',
    { className: 'event', dataset: { type: e.type } },
    el(
      'div',
      { className: 'handoff-head' },
      el('span', { className: 'event-time' }, tr.clock(e.at)),
      el('strong', {}, known('event', e.type)),
      e.stream === home ? null : el('span', { className: 'from-key' }, tr.parts('event.atKey', { key: keyLink(e.stream.replace(/^key:/, '')) })),
    ),
    el(
      'div',
      { className: 'handoff-body' },
      [
        e.by === null ? null : e.via === null ? t('event.by', { by: e.by }) : t('event.byVia', { by: e.by, via: e.via }),
        e.workerId === null ? null : t('handoff.worker', { worker: e.workerId }),
        e.why,
        e.renewals === undefined ? null : t('event.renewals', { count: e.renewals.count, first: tr.clock(e.renewals.firstAt) }),
      ]
        .filter((part) => part !== null && part !== '')
        .join(' · '),
      e.renewals === undefined ? null : [' ', el('button', { type: 'button', className: 'link show-renewals', onclick: showRenewals }, t('event.showRenewals'))],
    ),
  );

const showRenewals = () => {
  allRenewals = true;
  refreshView();
};

/** The error of its last failed attempt, from its events. */
const lastError = (history) => [...history.events].reverse().find((e) => e.type === 'JobFailed')?.why ?? null;

/** Characters of a job's args the view shows: args may be up to 1 MiB, which no one reads on a page. */
const ARGS_SHOWN = 2_000;

/** The args the job was enqueued (or last retried) with, from the events of its home stream; null when it has none, or they are not there (archived). */
const argsOf = (history) => [...history.events].reverse().find((e) => e.stream === history.stream && (e.type === 'JobEnqueued' || e.type === 'JobRetried') && 'args' in e.data)?.data.args ?? null;

/** A job's args, pretty-printed as text (never markup), cut at ARGS_SHOWN characters with how many more there are. */
const renderArgs = (history) => {
  const args = argsOf(history);
  $('job-args-block').hidden = args === null;
  if (args === null) return;
  const text = JSON.stringify(args, null, 2);
  // Not between the two halves of a character outside the BMP.
  const shown = text.length <= ARGS_SHOWN ? text : text.slice(0, /[\uD800-\uDBFF]/.test(text[ARGS_SHOWN - 1]) ? ARGS_SHOWN - 1 : ARGS_SHOWN);
  $('job-args').textContent = shown;
  $('job-args-cut').hidden = shown.length === text.length;
  $('job-args-cut').textContent = t('args.cut', { count: text.length - shown.length });
};

/** The job's status; now, a running job whose worker the presence calls gone is not said to run. */
const statusOf = (x, workers) =>
  x.status === 'running' && asOf === null && !workers.some((w) => w.id === x.holding?.lease.workerId && w.state === 'live') ? 'worker-gone' : x.status;

const renderSummary = ({ history, explanation: x }, workers) => {
  const error = x.ended?.lastError ?? lastError(history);
  const status = statusOf(x, workers);
  $('job-summary').replaceChildren(
    el('span', { className: `badge status-${status}` }, known('jobStatus', status)),
    ...(x.attempts === null ? [] : [el('span', {}, t('job.attempts', { attempts: x.attempts, max: x.maxAttempts }))]),
    ...(error === null ? [] : [el('span', { className: 'error-text job-error' }, t('job.lastError', { error }))]),
  );
};

export const renderJobView = (jobId, loaded, workers) => {
  $('job-title').textContent = jobId;
  $('job-title').title = jobId;
  $('job-missing').hidden = loaded === null || loaded.data !== null;
  $('job-body').hidden = loaded === null || loaded.data === null;
  if (loaded === null) {
    for (const id of ['job-summary', 'job-standing', 'job-limits', 'job-waits', 'job-events']) $(id).replaceChildren();
    $('job-args-block').hidden = true;
    return void ($('job-key').textContent = t('status.loading'));
  }
  if (loaded.data === null) return void ($('job-key').textContent = '');
  const { key, history, explanation } = loaded.data;
  $('job-key').replaceChildren(...(key === null ? [t('job.noKey')] : tr.parts('job.ofKey', { key: keyLink(key) })));
  renderSummary(loaded.data, workers);
  renderArgs(history);
  renderWhy(explanation, workers);
  $('job-events').replaceChildren(...history.events.map((e) => eventItem(e, history.stream)));
};

/** The "as of" field: a moment in this browser's time zone, sent as epoch ms; empty (or Now) is now. `refresh` reads the page again. */
export const wireJobView = (refresh) => {
  refreshView = refresh;
  $('job-at-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const value = $('job-at').value;
    const ms = value === '' ? NaN : new Date(value).getTime();
    asOf = Number.isFinite(ms) ? ms : null;
    refresh();
  });
  $('job-at-now').addEventListener('click', () => {
    $('job-at').value = '';
    asOf = null;
    refresh();
  });
  window.addEventListener('hashchange', () => {
    asOf = null;
    allRenewals = false;
    $('job-at').value = '';
  });
};

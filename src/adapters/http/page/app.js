// The jobledger dashboard. Plain JavaScript served by `jobledger serve`, no dependencies.
// Every value from the server is put on the page as text (textContent, text nodes, attributes
// set one by one), never parsed as HTML: a key named `<img src=x onerror=alert(1)>` shows as
// those characters. Every text of the page's own comes from the catalogue (i18n.js), in the
// language picked in the header; the server's data and error messages are shown as they are.
// This module puts the page together: the cards, the keys and a key's view; the warnings
// (warnings.js), the workers and queues (workers.js), failed and dead jobs (dead-jobs.js) and a
// job's view (job-view.js) render their own sections, all with ui.js.

import { LANGUAGES } from './i18n.js';
import { readDeadJobs, renderDeadJobs, wireDeadJobs } from './dead-jobs.js';
import { readJob, renderJobView, wireJobView } from './job-view.js';
import {
  $,
  act,
  age,
  ago,
  ApiError,
  clockWithRelative,
  el,
  fromNow,
  getJson,
  holderBadge,
  jobLink,
  keyHref,
  keyLink,
  known,
  orMissing,
  postJson,
  refreshWith,
  repaintToasts,
  setText,
  t,
  tr,
  askToken,
  storedToken,
  useLanguage,
  whoIsToken,
} from './ui.js';
import { renderWarnings } from './warnings.js';
import { renderWorkers, wireWorkers } from './workers.js';

const REFRESH_MS = 2000;

// ---- state ---------------------------------------------------------------------

const state = {
  /** The page of keys on view, in the server's order, and where it is: { sort, dir, limit, offset, matched } (GET /api/keys). */
  keys: [],
  keysPage: null,
  totals: null,
  /** The API's warnings (GET /api/keys), the workers (and the `now` of their answer) and the queues. */
  warnings: [],
  workers: [],
  workersAt: 0,
  queues: [],
  /** What the keys table asks the server for: a sort (dir null: the sort's own direction), the filter, the page. */
  sort: { by: 'attention', dir: null },
  filter: '',
  onlyAtLimit: false,
  onlyAttention: false,
  offset: 0,
  /** What the hash names: { kind: 'key' | 'job', id }, or null for the keys alone. */
  view: null,
  /** The view's data once read: { view, data } (data null: the server does not know it). */
  loaded: null,
  /** How many jobs of each list the key view asks for (null: the server's default, 100); back to null with another view. */
  listed: null,
  /** When the server last answered every read of a refresh (browser clock), and what went wrong since. */
  updatedAt: null,
  failure: null,
};

const loadedData = () => (state.loaded !== null && state.loaded.view === state.view ? state.loaded : null);

/** The key a view is about: the key view's, or the job's once read. */
const viewKey = () => {
  if (state.view === null) return null;
  if (state.view.kind === 'key') return state.view.id;
  return loadedData()?.data?.key ?? null;
};

// ---- keys table ----------------------------------------------------------------

/** Keys a page of the table shows; the server sorts, filters and counts them all. */
const KEYS_PAGE = 50;
/** The orders the server offers (src/adapters/postgres/queries/key-page.ts KEY_SORTS), named in the picker as their columns are. */
const SORTS = { attention: 'keys.sortAttention', key: 'col.key', inUse: 'col.inUse', lease: 'col.lease', parked: 'col.parked', scheduled: 'col.scheduled', oldestWait: 'col.oldestWait' };
/** Typing in the filter asks the server once the typing pauses, not at every letter. */
const FILTER_PAUSE_MS = 250;

/** The query of the keys table's page. */
const keysQuery = () => ({
  limit: String(KEYS_PAGE),
  offset: state.offset === 0 ? undefined : String(state.offset),
  sort: state.sort.by,
  dir: state.sort.dir ?? undefined,
  match: state.filter === '' ? undefined : state.filter,
  atLimit: state.onlyAtLimit ? 'true' : undefined,
  attention: state.onlyAttention ? 'true' : undefined,
});

// A key's worst holder state; one a newer server names and this page does not know yet is shown as the server says it.
const leaseBadge = (leaseState) => el('span', { className: `badge lease-${leaseState}` }, known('lease', leaseState));

// A key with an event that does not decode: its commands are refused and its jobs wait until the
// event is fixed (or a release reads it); the next successful read ends the quarantine.
const quarantineBadge = (q) =>
  q ? el('span', { className: 'badge quarantined-badge', title: t('badge.quarantinedTitle', { revision: q.revision, position: q.position, error: q.error }) }, t('badge.quarantined')) : null;

// A paused key admits nothing new (holders finish, parked jobs keep their order) until resumed.
const pausedBadge = (p) =>
  p ? el('span', { className: 'badge paused-badge', title: p.reason ? t('badge.pausedTitleReason', { by: p.by, reason: p.reason }) : t('badge.pausedTitle', { by: p.by }) }, t('badge.paused')) : null;

const quarantineText = (q) =>
  t('key.quarantine', { since: tr.clock(q.firstSeen), revision: q.revision, position: q.position, error: q.error, readers: q.readers.join(', ') });

const attentionBadge = (causes) => (causes && causes.length > 0 ? el('span', { className: 'badge attention-badge' }, t('badge.attention')) : null);

const renderKeys = () => {
  const selected = viewKey();
  const rows = state.keys;
  $('keys-body').replaceChildren(
    ...rows.map((k) =>
      el(
        'tr',
        { className: [k.atLimit ? 'at-limit' : '', k.key === selected ? 'selected' : ''].join(' ').trim() || undefined, dataset: { key: k.key } },
        el(
          'td',
          { dataset: { label: t('col.key') } },
          el('a', { href: keyHref(k.key), className: 'key-link', title: k.key, 'aria-current': k.key === selected ? 'page' : undefined }, k.key),
          quarantineBadge(k.quarantine),
          pausedBadge(k.paused),
          attentionBadge(k.attention),
        ),
        el(
          'td',
          { dataset: { label: t('col.inUse') } },
          el('span', { className: 'use' }, `${tr.number(k.inUse)} / ${tr.number(k.limit)}`),
          k.atLimit ? el('span', { className: 'badge at-limit-badge' }, t('badge.atLimit')) : null,
        ),
        el('td', { dataset: { label: t('col.lease') } }, leaseBadge(k.leaseState)),
        el('td', { dataset: { label: t('col.parked') }, className: 'num' }, tr.number(k.parked)),
        el('td', { dataset: { label: t('col.scheduled') }, className: 'num' }, tr.number(k.scheduled)),
        el('td', { dataset: { label: t('col.oldestWait') } }, k.oldestParkedAt === null ? '–' : age(k.oldestParkedAt)),
      ),
    ),
  );
  const empty = $('keys-empty');
  empty.hidden = rows.length > 0;
  empty.textContent = state.totals === null || state.totals.keys === 0 ? t('keys.none') : t('keys.noMatch');
  const page = state.keysPage;
  for (const th of document.querySelectorAll('#keys-table th[data-sort]')) {
    th.setAttribute('aria-sort', page !== null && th.dataset.sort === page.sort ? (page.dir === 'asc' ? 'ascending' : 'descending') : 'none');
  }
  $('keys-sort').value = state.sort.by;
  // Where the page is among the keys the filter matches, and the way to the others.
  $('keys-pager').hidden = page === null || page.matched <= page.limit;
  if (page !== null) {
    setText('keys-range', page.matched === 0 ? '' : t('keys.range', { from: page.offset + 1, to: page.offset + rows.length, count: page.matched }));
    $('keys-prev').disabled = page.offset === 0;
    $('keys-next').disabled = page.offset + page.limit >= page.matched;
  }
};

/**
 * What the held slots are doing, from the holders' states: "all running on live workers" only when
 * every holder is; else each state that has some ("2 running · 1 worker gone · 1 admitted, not started").
 */
const holdersText = (totals) => {
  const { running, unstarted, expired, workerGone } = totals.holders;
  if (totals.slotsHeld === 0) return t('cards.noneHeld');
  if (running === totals.slotsHeld) return t('cards.allRunning');
  return [
    running > 0 ? t('cards.running', { count: running }) : null,
    workerGone > 0 ? t('cards.workerGone', { count: workerGone }) : null,
    expired > 0 ? t('cards.expired', { count: expired }) : null,
    unstarted > 0 ? t('cards.unstarted', { count: unstarted }) : null,
  ]
    .filter(Boolean)
    .join(' · ');
};

/** The stored token's operator, asked once per token (the header says "signed in as alice"). */
let who = { token: null, who: undefined };

const refreshWho = async () => {
  if (storedToken() === who.token && who.who !== undefined) return;
  who = await whoIsToken();
};

const renderWho = () =>
  setText('who', who.who === undefined ? '' : who.who.name === null ? t('token.shared') : t('token.signedIn', { name: who.who.name }));

/** Bytes as megabytes in the page's language ("12,3 MB"). */
const megabytes = (bytes) => `${tr.number(Math.round(bytes / 104_857.6) / 10)} MB`;

const renderTotals = () => {
  const totals = state.totals;
  if (totals === null) return;
  setText('card-at-limit', tr.number(totals.keysAtLimit));
  setText('card-keys', t('cards.ofKeys', { count: totals.keys }));
  $('card-at-limit-box').classList.toggle('alert', totals.keysAtLimit > 0);
  setText('card-slots', tr.number(totals.slotsHeld));
  setText('card-holders', holdersText(totals));
  setText('card-parked', tr.number(totals.parked));
  setText('card-scheduled', t('cards.scheduled', { count: totals.scheduled }));
  setText('card-oldest', totals.oldestParkedAt === null ? '–' : age(totals.oldestParkedAt));
  setText('card-workers', tr.number(totals.workers.live));
  setText('card-workers-gone', t('cards.workersGone', { count: totals.workers.gone }));
  // Live and archived events (jobledger archive moves finished jobs' events out of the live table).
  setText('card-ledger', t('cards.ledgerEvents', { count: totals.ledger.events + totals.ledger.archivedEvents }));
  setText('card-ledger-size', t('cards.ledgerSize', { live: megabytes(totals.ledger.bytes), archived: megabytes(totals.ledger.archivedBytes) }));
  // No live worker while slots are held: nobody runs them.
  $('card-workers-box').classList.toggle('alert', totals.workers.live === 0 && totals.slotsHeld > 0);
};

// ---- actions ---------------------------------------------------------------------

// A guest (a job of another key holding or waiting here as one of its further limits) is released
// or discarded at its own key, which frees it here and on every other limit at once.
const homeOf = (job, key) => job.home ?? key;

/** A guest's home is a key the dashboard can act on; a job without a key (home job:<id>) is not. */
const actionable = (job) => job.home === null || !job.home.startsWith('job:');

const ownJobs = (jobs) => jobs.filter((j) => j.home === null);

// What a release does to a holder (README, semantics): a started one has used its attempt and is
// retried after a backoff (dead with none left); one no worker started parks again at its place.
const releaseHolder = (key, holder) =>
  act(
    {
      title: t('release.title', { job: holder.jobId }),
      paragraphs: [
        holder.home === null ? t('release.text', { key }) : t('release.textGuest', { home: holder.home }),
        holder.workerId === null ? t('release.unstarted') : t('release.started', { attempt: holder.attempt ?? 1 }),
      ],
      warning:
        holder.state === 'running'
          ? t('release.live', { time: tr.clock(holder.expiresAt) })
          : holder.state === 'worker-gone'
            ? t('release.workerGone', { time: tr.clock(holder.expiresAt), worker: holder.workerId })
            : null,
      confirm: t('release.confirm'),
      danger: true,
    },
    // A holder whose worker is gone runs nowhere: its slot is freed at once (force), recorded so; a live one's once its handler stopped.
    () => postJson('/api/keys/release', { key: homeOf(holder, key), jobId: holder.jobId, ...(holder.state === 'worker-gone' ? { force: true } : {}) }),
    (r) => t('done.released', { count: r.released.length, key: homeOf(holder, key) }),
  );

// The detail lists the first jobs of each list (`listed`) and counts them all: what an action on
// all of them does is said from the counts; what only the listed ones show (started or not) is
// said when the list is whole.
const releaseAll = (detail) => {
  const { key, counts } = detail;
  const own = ownJobs(detail.holders);
  const whole = own.length === counts.ownHolders;
  const guests = counts.holders - counts.ownHolders;
  const started = own.filter((h) => h.workerId !== null).length;
  const live = own.filter((h) => h.state === 'running').length;
  return act(
    {
      title: t('releaseAll.title', { count: counts.ownHolders, key }),
      paragraphs: [
        t('releaseAll.text', { count: counts.ownHolders }),
        whole && started > 0 ? t('releaseAll.started', { count: started }) : null,
        whole && own.length > started ? t('releaseAll.unstarted', { count: own.length - started }) : null,
        guests > 0 ? t('releaseAll.guests', { count: guests }) : null,
      ],
      jobIds: own.map((h) => h.jobId),
      count: counts.ownHolders,
      warning: live > 0 ? t('releaseAll.live', { count: live }) : null,
      confirm: t('releaseAll.confirm', { count: counts.ownHolders }),
      danger: true,
    },
    () => postJson('/api/keys/release', { key }),
    (r) => t('done.released', { count: r.released.length, key }),
  );
};

const discardOne = (key, job) =>
  act(
    {
      title: t('discard.title', { job: job.jobId }),
      paragraphs: [t('discard.text'), job.home === null ? null : t('discard.guest', { home: job.home })],
      confirm: t('discard.confirm'),
      danger: true,
    },
    () => postJson('/api/keys/discard', { key: homeOf(job, key), jobIds: [job.jobId] }),
    (r) => t('done.discarded', { count: r.discarded.length, key: homeOf(job, key) }),
  );

const discardAll = (detail) => {
  const { key, counts } = detail;
  const guests = counts.parked - counts.ownParked;
  return act(
    {
      title: t('discardAll.title', { count: counts.ownParked, key }),
      paragraphs: [t('discardAll.text', { count: counts.ownParked }), guests > 0 ? t('discardAll.guests', { count: guests }) : null],
      jobIds: ownJobs(detail.parked).map((p) => p.jobId),
      count: counts.ownParked,
      confirm: t('discardAll.confirm', { count: counts.ownParked }),
      danger: true,
    },
    () => postJson('/api/keys/discard', { key }),
    (r) => t('done.discarded', { count: r.discarded.length, key }),
  );
};

const changeLimit = (detail, limit) => {
  const { key } = detail;
  const current = detail.limit;
  // A raise promotes the key's own parked jobs into the new free slots (further limits may hold some back).
  const promotable = Math.min(Math.max(0, limit - detail.counts.holders), detail.counts.ownParked);
  const consequence = limit < current ? t('limitChange.lower', { limit }) : promotable > 0 ? t('limitChange.raise', { count: promotable }) : t('limitChange.raiseNone');
  return act(
    { title: t('limitChange.title', { key, from: current, to: limit }), paragraphs: [consequence], confirm: t('limit.submit') },
    () => postJson('/api/keys/limit', { key, limit }),
    (r) => (r.promoted.length ? t('done.limitPromoted', { key, limit: r.limit, count: r.promoted.length }) : t('done.limit', { key, limit: r.limit })),
  );
};

const togglePause = (detail) => {
  const { key } = detail;
  const pausing = detail.paused === null;
  return act(
    pausing
      ? { title: t('pause.title', { key }), paragraphs: [t('pause.text')], confirm: t('pause.button') }
      : { title: t('resume.title', { key }), paragraphs: [t('resume.text', { count: detail.counts.parked })], confirm: t('resume.button') },
    () => postJson(pausing ? '/api/keys/pause' : '/api/keys/resume', { key }),
    (r) => (pausing ? t('done.paused', { key }) : r.promoted.length ? t('done.resumedPromoted', { key, count: r.promoted.length }) : t('done.resumed', { key })),
  );
};

// ---- key view ------------------------------------------------------------------

const REASONS = new Set(['completed', 'failed', 'expired', 'revoked', 'yielded', 'cancelled']);

const jobCell = (jobId, name) => [jobLink(jobId), name ? el('span', { className: 'job-name' }, name) : null];

/** Where a guest is from: a link to its own key's view. */
const fromKey = (home) =>
  home === null
    ? null
    : el('span', { className: 'from-key' }, home.startsWith('job:') ? t('guest.fromJob') : tr.parts('guest.fromKey', { key: keyLink(home) }));

/** The job's further limits besides the key on view (a guest's list names it too), as small badges. */
const limitBadges = (limits, key) => {
  const others = (limits ?? []).filter((k) => k !== key);
  if (others.length === 0) return null;
  return el(
    'span',
    { className: 'limits' },
    el('span', { className: 'visually-hidden' }, t('limits.also')),
    others.map((k) => el('span', { className: 'badge limit-badge', title: t('limits.badgeTitle', { key: k }) }, k)),
  );
};

/** The Job cell: id and name, where a guest is from, and the job's further limits (one block, so a phone's cell keeps them together). */
const jobCellOf = (job, key) => el('div', {}, jobCell(job.jobId, job.name), fromKey(job.home ?? null), limitBadges(job.limits, key));

/** "waits on: t (5/5 full), api (paused)": the job's other limits that are full or paused now. */
const waitsOnText = (waitsOn) =>
  waitsOn && waitsOn.length > 0
    ? t('waitsOn.list', { list: waitsOn.map((w) => (w.paused ? t('waitsOn.paused', { key: w.key }) : t('waitsOn.full', { key: w.key, inUse: w.inUse, limit: w.limit }))).join(', ') })
    : null;

const renderHolders = (detail) => {
  $('holders-body').replaceChildren(
    ...detail.holders.map((h) =>
      el(
        'tr',
        { dataset: { job: h.jobId } },
        el('td', { dataset: { label: t('col.job') } }, jobCellOf(h, detail.key)),
        el('td', { dataset: { label: t('col.holderState') } }, holderBadge(h)),
        el('td', { dataset: { label: t('col.since') } }, t('holders.since', { time: tr.clock(h.acquiredAt), how: t(`how.${h.how}`), ago: ago(h.acquiredAt) })),
        el(
          'td',
          { dataset: { label: t('col.expiry') } },
          h.expiresAt === null ? '–' : clockWithRelative(h.expiresAt),
          // A job may carry a lease other than its key's (the summary's): say so beside its expiry.
          h.leaseMs !== undefined && h.leaseMs !== detail.leaseMs ? el('div', { className: 'own-lease' }, t('holder.ownLease', { duration: tr.duration(h.leaseMs) })) : null,
        ),
        el('td', { dataset: { label: t('col.attempt') }, className: 'num' }, h.attempt === null ? '–' : tr.number(h.attempt)),
        el('td', {}, actionable(h) ? el('button', { type: 'button', className: 'danger release', onclick: () => releaseHolder(detail.key, h) }, t('holders.release')) : null),
      ),
    ),
  );
  $('holders-empty').hidden = detail.holders.length > 0;
  $('holders-table').hidden = detail.holders.length === 0;
  // Release all frees the key's own holders: a guest is released at its own key.
  $('release-all').hidden = detail.counts.ownHolders < 2;
  renderMore('holders', detail.holders.length, detail.counts.holders);
};

/** The most jobs of a list the server gives (MAX_DETAIL_LIST, key-detail.ts); its default is 100. */
const MAX_LISTED = 1000;

/** Under a list cut short: how many of how many it shows, and a button for ten times as many (up to MAX_LISTED). */
const renderMore = (list, shown, count) => {
  $(`${list}-more`).hidden = shown >= count;
  setText(`${list}-more-text`, t('list.more', { shown, count }));
  $(`${list}-more-button`).hidden = shown >= MAX_LISTED;
};

const showMore = () => {
  state.listed = Math.min(MAX_LISTED, (state.listed ?? 100) * 10);
  void refresh();
};

const renderParked = (detail) => {
  $('parked-body').replaceChildren(
    ...detail.parked.map((p, i) =>
      el(
        'tr',
        { dataset: { job: p.jobId } },
        el('td', { dataset: { label: t('col.position') }, className: 'num' }, tr.number(i + 1)),
        el('td', { dataset: { label: t('col.job') } }, jobCellOf(p, detail.key)),
        el('td', { dataset: { label: t('col.priority') }, className: 'num' }, tr.number(p.priority)),
        el('td', { dataset: { label: t('col.waiting') } }, el('div', {}, age(p.parkedAt), waitsOnText(p.waitsOn) && el('span', { className: 'waits-on' }, waitsOnText(p.waitsOn)))),
        el('td', {}, actionable(p) ? el('button', { type: 'button', className: 'danger discard', onclick: () => discardOne(detail.key, p) }, t('parked.discard')) : null),
      ),
    ),
  );
  $('parked-empty').hidden = detail.parked.length > 0;
  $('parked-table').hidden = detail.parked.length === 0;
  // As Release all: the key's own parked jobs.
  $('discard-all').hidden = detail.counts.ownParked < 2;
  renderMore('parked', detail.parked.length, detail.counts.parked);
};

const renderScheduled = (detail) => {
  $('scheduled-body').replaceChildren(
    ...detail.scheduled.map((s) =>
      el(
        'tr',
        {},
        el('td', { dataset: { label: t('col.job') } }, jobCell(s.jobId, s.name)),
        el('td', { dataset: { label: t('col.due') } }, clockWithRelative(s.runAt)),
        el('td', { dataset: { label: t('col.attemptsSoFar') }, className: 'num' }, tr.number(s.attempts)),
      ),
    ),
  );
  $('scheduled-empty').hidden = detail.scheduled.length > 0;
  $('scheduled-table').hidden = detail.scheduled.length === 0;
  renderMore('scheduled', detail.scheduled.length, detail.counts.scheduled);
};

const whyOf = (h) => {
  if (h.releasedAt === null) return t('handoff.stillHeld');
  let why = REASONS.has(h.reason) ? t(`reason.${h.reason}`) : h.reason;
  if (h.by) why = t('handoff.by', { reason: why, by: h.by });
  if (h.error) why = t('handoff.error', { reason: why, error: h.error });
  return why;
};

/** The handoffs (newest first) into `list`; `key` is the key on view, whose limit badge a handoff does not repeat. */
const renderHandoffs = (list, empty, handoffs, key) => {
  list.replaceChildren(
    ...handoffs.map((h) => {
      const held = h.releasedAt === null ? t('handoff.holding', { duration: age(h.acquiredAt) }) : t('handoff.held', { duration: tr.duration(h.releasedAt - h.acquiredAt) });
      const how = h.how === 'promoted' ? t('handoff.promoted', { duration: tr.duration(h.parkedMs) }) : t('handoff.acquired');
      // A guest's worker, attempt and the who or what of its release are in its own key's audit.
      const who =
        h.home !== undefined
          ? t('handoff.guestWorker')
          : h.attempt === null
            ? t('handoff.worker', { worker: h.workerId ?? '–' })
            : t('handoff.workerAttempt', { worker: h.workerId ?? '–', attempt: h.attempt });
      return el(
        'li',
        { className: `handoff reason-${h.reason ?? 'held'}`, dataset: { job: h.jobId } },
        el(
          'div',
          { className: 'handoff-head' },
          jobLink(h.jobId),
          fromKey(h.home ?? null),
          limitBadges(h.limits, key),
          el('span', { className: 'badge' }, whyOf(h)),
        ),
        el(
          'div',
          { className: 'handoff-body' },
          t('handoff.body', { how, who, held, from: tr.clock(h.acquiredAt), to: h.releasedAt === null ? t('handoff.now') : tr.clock(h.releasedAt) }),
        ),
      );
    }),
  );
  empty.hidden = handoffs.length > 0;
};

const renderDetail = (detail) => {
  $('key-missing').hidden = true;
  $('key-body').hidden = false;
  $('key-quarantine').hidden = detail.quarantine === null;
  setText('key-quarantine', detail.quarantine === null ? '' : quarantineText(detail.quarantine));
  const paused = detail.paused;
  $('key-paused').hidden = paused === null;
  setText('key-paused', paused === null ? '' : t(paused.reason ? 'key.pausedReason' : 'key.paused', { by: paused.by, when: fromNow(paused.at), reason: paused.reason ?? '' }));
  setText('pause-toggle', paused === null ? t('pause.button') : t('resume.button'));
  setText(
    'key-summary',
    t('key.summary', { held: detail.counts.holders, limit: detail.limit, parked: detail.counts.parked, scheduled: detail.counts.scheduled, lease: tr.duration(detail.leaseMs) }),
  );
  const limit = $('limit-input');
  if (document.activeElement !== limit) limit.value = String(detail.limit);
  renderHolders(detail);
  renderParked(detail);
  renderScheduled(detail);
  renderHandoffs($('handoffs'), $('handoffs-empty'), detail.handoffs, detail.key);
};

const renderKeyView = (key) => {
  setText('key-title', key);
  $('key-title').title = key;
  const loaded = loadedData();
  if (loaded === null) {
    // Nothing of the key shown before (its buttons act on the key that was on view) until it is read.
    setText('key-summary', t('status.loading'));
    for (const id of ['key-body', 'key-missing', 'key-quarantine']) $(id).hidden = true;
    for (const id of ['holders-body', 'parked-body', 'scheduled-body', 'handoffs']) $(id).replaceChildren();
    return;
  }
  if (loaded.data === null) {
    $('key-missing').hidden = false;
    $('key-quarantine').hidden = true;
    $('key-body').hidden = true;
    setText('key-summary', '');
    return;
  }
  renderDetail(loaded.data);
};

// ---- refresh, status and navigation --------------------------------------------------

const renderStatus = () => {
  const failure = state.failure;
  const time = state.updatedAt === null ? '–' : tr.timeOfDay(state.updatedAt);
  let text;
  if (failure === null) text = state.updatedAt === null ? t('status.loading') : t('status.updated', { time });
  else if (failure instanceof ApiError) text = t('status.refused', { time, error: failure.message });
  else text = state.updatedAt === null ? t('status.staleNever') : t('status.stale', { time });
  setText('status', text);
  $('status').classList.toggle('stale', failure !== null);
  // The values shown are those of the last answer: dimmed until the server answers again.
  document.querySelector('main').classList.toggle('stale', failure !== null);
};

const renderAll = () => {
  renderTotals();
  renderWho();
  renderWarnings(state.warnings);
  renderKeys();
  renderWorkers(state.workers, state.queues, state.workersAt);
  renderDeadJobs();
  const view = state.view;
  $('key-view').hidden = view?.kind !== 'key';
  $('job-view').hidden = view?.kind !== 'job';
  if (view?.kind === 'key') renderKeyView(view.id);
  if (view?.kind === 'job') renderJobView(view.id, loadedData(), state.workers);
  renderStatus();
};

/** The view's data; null when the server does not know the key or job (404). */
const readView = (view) =>
  view.kind === 'key' ? orMissing(() => getJson('/api/keys/detail', { key: view.id, limit: state.listed === null ? undefined : String(state.listed) })) : readJob(view.id);

/** The keys' answer, taken only when it is for the query on view (a later change of the filter or the page asked another). */
const takeKeys = (query, overview) => {
  if (JSON.stringify(query) !== JSON.stringify(keysQuery())) return;
  state.keys = overview.keys;
  state.keysPage = overview.page;
  state.totals = overview.totals;
  state.warnings = overview.warnings;
  // Keys gone from under a later page (filtered away, say): back to the last page that has some.
  const { matched, limit } = overview.page;
  if (state.offset > 0 && state.offset >= matched) {
    state.offset = Math.max(0, Math.floor((matched - 1) / limit) * limit);
    void readKeys();
  }
};

const refresh = async () => {
  const view = state.view;
  const query = keysQuery();
  try {
    const [overview, workers, queues] = await Promise.all([getJson('/api/keys', query), getJson('/api/workers'), getJson('/api/queues'), readDeadJobs(), refreshWho()]);
    takeKeys(query, overview);
    state.workers = workers.workers;
    state.workersAt = workers.now;
    state.queues = queues.queues;
    if (view !== null) {
      const read = await readView(view);
      if (state.view === view) state.loaded = { view, data: read };
    }
    state.updatedAt = Date.now();
    state.failure = null;
  } catch (error) {
    state.failure = error;
  }
  renderAll();
};

/** The keys table alone, read again for a new sort, filter or page. */
const readKeys = async () => {
  const query = keysQuery();
  try {
    takeKeys(query, await getJson('/api/keys', query));
    state.failure = null;
  } catch (error) {
    state.failure = error;
  }
  renderTotals();
  renderWarnings(state.warnings);
  renderKeys();
  renderStatus();
};

const viewOfHash = () => {
  const params = new URLSearchParams(location.hash.slice(1));
  for (const kind of ['key', 'job']) {
    const id = params.get(kind);
    if (id !== null && id !== '') return { kind, id };
  }
  return null;
};

/** Shows the view the hash names (a link, back/forward, a URL opened in a new tab), in view once read. */
const showView = async () => {
  state.view = viewOfHash();
  state.listed = null;
  state.loaded = null;
  renderAll();
  await refresh();
  if (state.view !== null) $(`${state.view.kind}-view`).scrollIntoView({ block: 'start' });
};

let timer;
const loop = async () => {
  clearTimeout(timer);
  if (!document.hidden) await refresh();
  timer = setTimeout(loop, REFRESH_MS);
};

/** The page's own texts: elements and attributes that name a catalogue key. */
const applyStatic = () => {
  document.documentElement.lang = tr.lang;
  for (const node of document.querySelectorAll('[data-i18n]')) node.textContent = t(node.dataset.i18n);
  for (const node of document.querySelectorAll('[data-i18n-placeholder]')) node.placeholder = t(node.dataset.i18nPlaceholder);
  for (const node of document.querySelectorAll('[data-i18n-label]')) node.setAttribute('aria-label', t(node.dataset.i18nLabel));
  $('token-text').replaceChildren(
    ...tr.parts('token.text', { named: el('code', {}, 'JOBLEDGER_TOKENS'), env: el('code', {}, 'JOBLEDGER_TOKEN'), command: el('code', {}, 'jobledger serve') }),
  );
  $('language').value = tr.lang;
  $('keys-sort').replaceChildren(...Object.entries(SORTS).map(([by, label]) => el('option', { value: by }, t(label))));
  $('keys-sort').value = state.sort.by;
};

const setLanguage = (lang) => {
  useLanguage(lang);
  applyStatic();
  repaintToasts();
  renderAll();
};

const wire = () => {
  $('language').replaceChildren(...Object.entries(LANGUAGES).map(([code, name]) => el('option', { value: code, lang: code }, name)));
  $('language').addEventListener('change', (e) => setLanguage(e.target.value));
  // A column sorts by it in its own direction first (the server's: what to look at first), then the other way.
  const sortBy = (by, dir) => {
    state.sort = { by, dir };
    state.offset = 0;
    void readKeys();
  };
  for (const th of document.querySelectorAll('#keys-table th[data-sort]')) {
    th.querySelector('button').addEventListener('click', () => {
      const by = th.dataset.sort;
      const page = state.keysPage;
      sortBy(by, page !== null && page.sort === by ? (page.dir === 'asc' ? 'desc' : 'asc') : null);
    });
  }
  $('keys-sort').addEventListener('change', (e) => sortBy(e.target.value, null));
  let typing;
  $('filter').addEventListener('input', (e) => {
    state.filter = e.target.value;
    state.offset = 0;
    clearTimeout(typing);
    typing = setTimeout(readKeys, FILTER_PAUSE_MS);
  });
  const onlyIf = (id, field) =>
    $(id).addEventListener('change', (e) => {
      state[field] = e.target.checked;
      state.offset = 0;
      void readKeys();
    });
  onlyIf('only-at-limit', 'onlyAtLimit');
  onlyIf('only-attention', 'onlyAttention');
  const turn = (by) => {
    state.offset = Math.max(0, state.offset + by * KEYS_PAGE);
    void readKeys();
  };
  $('keys-prev').addEventListener('click', () => turn(-1));
  $('keys-next').addEventListener('click', () => turn(1));
  $('token-button').addEventListener('click', () => askToken());
  const detail = () => (state.view?.kind === 'key' ? (loadedData()?.data ?? null) : null);
  $('release-all').addEventListener('click', () => detail() && releaseAll(detail()));
  $('discard-all').addEventListener('click', () => detail() && discardAll(detail()));
  for (const list of ['holders', 'parked', 'scheduled']) $(`${list}-more-button`).addEventListener('click', showMore);
  $('limit-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (detail()) changeLimit(detail(), Number($('limit-input').value));
  });
  $('pause-toggle').addEventListener('click', () => detail() && togglePause(detail()));
  wireWorkers(renderAll);
  wireDeadJobs(refresh);
  wireJobView(refresh);
  window.addEventListener('hashchange', showView);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) loop();
  });
};

refreshWith(() => refresh());
wire();
applyStatic();
showView().then(() => {
  timer = setTimeout(loop, REFRESH_MS);
});

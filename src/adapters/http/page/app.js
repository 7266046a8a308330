// The jobledger dashboard. Plain JavaScript served by `jobledger serve`, no dependencies.
// Every value from the server is put on the page as text (textContent, text nodes, attributes
// set one by one), never parsed as HTML: a key named `<img src=x onerror=alert(1)>` shows as
// those characters.

const REFRESH_MS = 2000;
const TOKEN_STORAGE = 'jobledger.token';

const $ = (id) => document.getElementById(id);

/** An element with attributes/properties and children (strings become text nodes). */
const el = (tag, props = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'className') node.className = value;
    else if (name === 'dataset') Object.assign(node.dataset, value);
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
};

const setText = (id, text) => {
  $(id).textContent = text;
};

// ---- time ------------------------------------------------------------------

/** Server time minus this browser's, so ages are measured on the server's clock. */
let skew = 0;
const now = () => Date.now() + skew;

const duration = (ms) => {
  if (ms === null || ms === undefined) return '–';
  const s = Math.max(0, ms) / 1000;
  if (s < 10) return `${s.toFixed(1)} s`;
  if (s < 60) return `${Math.floor(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${Math.floor(s % 60)} s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h} h ${m % 60} m`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
};

const clock = (epochMs) => (epochMs === null || epochMs === undefined ? '–' : new Date(epochMs).toLocaleString());
const ago = (epochMs) => (epochMs === null || epochMs === undefined ? '–' : `${duration(now() - epochMs)} ago`);
const fromNow = (epochMs) => {
  if (epochMs === null || epochMs === undefined) return '–';
  const d = epochMs - now();
  return d >= 0 ? `in ${duration(d)}` : `${duration(-d)} ago`;
};

// ---- API -------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
  }
}

const getJson = async (path) => {
  const response = await fetch(path, { headers: { accept: 'application/json' } });
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body);
  if (body && typeof body.now === 'number') skew = body.now - Date.now();
  return body;
};

/** Asks for the token in a dialog; resolves to it, or null when cancelled. */
const askToken = () =>
  new Promise((resolve) => {
    const dialog = $('token-dialog');
    const input = $('token-input');
    input.value = sessionStorage.getItem(TOKEN_STORAGE) ?? '';
    dialog.addEventListener(
      'close',
      () => {
        const token = input.value.trim();
        if (dialog.returnValue === 'ok' && token !== '') {
          sessionStorage.setItem(TOKEN_STORAGE, token);
          resolve(token);
        } else resolve(null);
      },
      { once: true },
    );
    dialog.showModal();
    input.focus();
  });

/** POSTs with the bearer token (asked for once per tab, and again when the server refuses it). */
const postJson = async (path, body) => {
  let token = sessionStorage.getItem(TOKEN_STORAGE) ?? (await askToken());
  for (let tries = 0; token !== null && tries < 2; tries++) {
    const response = await fetch(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify(body),
    });
    const result = await response.json().catch(() => null);
    if (response.ok) return result;
    if (response.status !== 401) throw new ApiError(response.status, result);
    sessionStorage.removeItem(TOKEN_STORAGE);
    token = await askToken();
  }
  throw new Error('no token given: nothing was changed');
};

// ---- messages and confirmation -----------------------------------------------

let messageTimer;
const showMessage = (text, kind = 'info') => {
  const box = $('message');
  box.textContent = text;
  box.className = `message ${kind}`;
  box.hidden = false;
  clearTimeout(messageTimer);
  messageTimer = setTimeout(() => (box.hidden = true), kind === 'error' ? 12000 : 6000);
};

/** A modal confirmation; resolves true only when the operator confirms. */
const confirmAction = ({ title, text, warning, confirm }) =>
  new Promise((resolve) => {
    const dialog = $('confirm');
    setText('confirm-title', title);
    setText('confirm-text', text);
    const warn = $('confirm-warning');
    warn.textContent = warning ?? '';
    warn.hidden = !warning;
    setText('confirm-ok', confirm);
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.returnValue = 'cancel';
    dialog.showModal();
  });

/** Confirms, runs the action, reports its result, refreshes. */
const act = async (confirmation, run, describe) => {
  if (!(await confirmAction(confirmation))) return;
  try {
    const result = await run();
    showMessage(describe(result));
  } catch (error) {
    showMessage(`Not done: ${error.message}`, 'error');
  }
  await refresh();
};

// ---- keys table ----------------------------------------------------------------

const state = { keys: [], sort: { by: 'key', dir: 1 }, filter: '', onlyAtLimit: false, key: null };

const LEASE_ORDER = { expired: 0, live: 1, unstarted: 2, none: 3 };
const sortValue = (row, by) => {
  if (by === 'inUse') return row.limit === 0 ? 0 : row.inUse / row.limit;
  if (by === 'leaseState') return LEASE_ORDER[row.leaseState];
  // The oldest wait first when sorting ascending by wait: no wait sorts last.
  if (by === 'oldestParkedAt') return row.oldestParkedAt === null ? Infinity : row.oldestParkedAt;
  return row[by];
};

const compare = (a, b) => {
  const { by, dir } = state.sort;
  const x = sortValue(a, by);
  const y = sortValue(b, by);
  if (x < y) return -dir;
  if (x > y) return dir;
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
};

const keyHref = (key) => `#key=${encodeURIComponent(key)}`;

const leaseBadge = (leaseState) => el('span', { className: `badge lease-${leaseState}` }, leaseState);

// A key with an event that does not decode: its commands are refused and its jobs wait until the
// event is fixed (or a release reads it); the next successful read ends the quarantine.
const quarantineBadge = (q) =>
  q ? el('span', { className: 'badge quarantined-badge', title: `revision ${q.revision} (position ${q.position}): ${q.error}` }, 'quarantined') : null;

// A paused key admits nothing new (holders finish, parked jobs keep their order) until resumed.
const pausedBadge = (p) => (p ? el('span', { className: 'badge paused-badge', title: `paused by ${p.by}${p.reason ? `: ${p.reason}` : ''}` }, 'paused') : null);

const quarantineText = (q) =>
  `Quarantined since ${clock(q.firstSeen)}: the event at revision ${q.revision} (global position ${q.position}) does not decode — ${q.error}. ` +
  `Stopped at it: ${q.readers.join(', ')}. Its commands are refused and its jobs wait; what is shown is the key before that event. ` +
  'The quarantine ends by itself once the event decodes (fixed, or read by a release that knows its type).';

const renderKeys = () => {
  const filter = state.filter.toLowerCase();
  const rows = state.keys
    .filter((k) => (!state.onlyAtLimit || k.atLimit) && k.key.toLowerCase().includes(filter))
    .sort(compare);
  const body = $('keys-body');
  body.replaceChildren(
    ...rows.map((k) =>
      el(
        'tr',
        { className: k.atLimit ? 'at-limit' : undefined, dataset: { key: k.key } },
        el('td', { dataset: { label: 'Key' } }, el('a', { href: keyHref(k.key), className: 'key-link' }, k.key), quarantineBadge(k.quarantine), pausedBadge(k.paused)),
        el('td', { dataset: { label: 'In use / limit' } }, el('span', { className: 'use' }, `${k.inUse} / ${k.limit}`), k.atLimit ? el('span', { className: 'badge at-limit-badge' }, 'at limit') : null),
        el('td', { dataset: { label: 'Lease' } }, leaseBadge(k.leaseState)),
        el('td', { dataset: { label: 'Parked' }, className: 'num' }, String(k.parked)),
        el('td', { dataset: { label: 'Scheduled' }, className: 'num' }, String(k.scheduled)),
        el('td', { dataset: { label: 'Oldest wait' } }, k.oldestParkedAt === null ? '–' : duration(now() - k.oldestParkedAt)),
      ),
    ),
  );
  const empty = $('keys-empty');
  empty.hidden = rows.length > 0;
  empty.textContent = state.keys.length === 0 ? 'No keys yet: enqueue a job with a key.' : 'No key matches the filter.';
  for (const th of document.querySelectorAll('#keys-table th[data-sort]')) {
    th.setAttribute('aria-sort', th.dataset.sort === state.sort.by ? (state.sort.dir > 0 ? 'ascending' : 'descending') : 'none');
  }
};

const renderTotals = (totals) => {
  setText('card-at-limit', String(totals.keysAtLimit));
  setText('card-keys', `of ${totals.keys} key${totals.keys === 1 ? '' : 's'}`);
  $('card-at-limit-box').classList.toggle('alert', totals.keysAtLimit > 0);
  setText('card-slots', String(totals.slotsHeld));
  const expired = state.keys.filter((k) => k.leaseState === 'expired').length;
  setText('card-expired', expired > 0 ? `${expired} key${expired === 1 ? '' : 's'} with an expired lease` : 'all leases live');
  setText('card-parked', String(totals.parked));
  setText('card-scheduled', `${totals.scheduled} scheduled`);
  setText('card-oldest', totals.oldestParkedAt === null ? '–' : duration(now() - totals.oldestParkedAt));
};

// ---- key view ------------------------------------------------------------------

const REASONS = {
  completed: 'completed',
  failed: 'failed',
  expired: 'lease expired',
  revoked: 'revoked',
  yielded: 'yielded (worker shut down)',
  cancelled: 'cancelled',
};

// A guest (a job of another key holding or waiting here as one of its further limits) is released
// or discarded at its own key, which frees it here and on every other limit at once.
const homeOf = (job, key) => job.home ?? key;

/** A guest's home is a key the dashboard can act on; a job without a key (home job:<id>) is not. */
const actionable = (job) => job.home === null || !job.home.startsWith('job:');

const releaseHolder = (key, holder) =>
  act(
    {
      title: `Release job ${holder.jobId}?`,
      text:
        holder.home === null
          ? `Its slot on key “${key}” goes back to the key, and the next parked job is promoted.`
          : `It holds this slot as one of its further limits: it is released at its own key “${holder.home}”, which frees its slot there, here and on each of its limits.`,
      warning:
        holder.leaseState === 'live'
          ? `Its lease is still live (until ${clock(holder.expiresAt)}): a worker may be running it right now. Releasing revokes the lease, the handler's signal is aborted, and its later result is refused.`
          : null,
      confirm: 'Release',
    },
    () => postJson('/api/keys/release', { key: homeOf(holder, key), jobId: holder.jobId }),
    (r) => `Released ${r.released.length} slot${r.released.length === 1 ? '' : 's'} of ${homeOf(holder, key)}.`,
  );

const ownJobs = (jobs) => jobs.filter((j) => j.home === null);

const releaseAll = (key, holders) => {
  const own = ownJobs(holders);
  const guests = holders.length - own.length;
  return act(
    {
      title: `Release every holder of “${key}”?`,
      text:
        `${own.length} slot${own.length === 1 ? '' : 's'} go back to the key; parked jobs are promoted into them.` +
        (guests > 0 ? ` ${guests} job${guests === 1 ? '' : 's'} of other keys keep theirs: release those at their own keys.` : ''),
      warning: own.some((h) => h.leaseState === 'live')
        ? 'Some of these leases are still live: their workers may be running them now. Releasing revokes the leases, aborts those handlers, and refuses their later results.'
        : null,
      confirm: 'Release all',
    },
    () => postJson('/api/keys/release', { key }),
    (r) => `Released ${r.released.length} slot${r.released.length === 1 ? '' : 's'} of ${key}.`,
  );
};

/** `job`: one parked job (a guest is discarded at its own key); null: every parked job of the key's own. */
const discard = (key, job) => {
  const at = job === null ? key : homeOf(job, key);
  return act(
    {
      title: job ? `Discard parked job ${job.jobId}?` : `Discard every parked job of “${key}”?`,
      text:
        'A discarded job never runs. The ledger records who discarded it.' +
        (job === null ? ' Jobs of other keys waiting here stay: discard those at their own keys.' : job.home === null ? '' : ` It waits here as one of its further limits: it is discarded at its own key “${job.home}”.`),
      warning: null,
      confirm: 'Discard',
    },
    () => postJson('/api/keys/discard', job ? { key: at, jobIds: [job.jobId] } : { key }),
    (r) => `Discarded ${r.discarded.length} parked job${r.discarded.length === 1 ? '' : 's'} of ${at}.`,
  );
};

const jobCell = (jobId, name) => [el('code', { className: 'job-id' }, jobId), name ? el('span', { className: 'job-name' }, name) : null];

/** Where a guest is from: a link to its own key's view. */
const fromKey = (home) =>
  home === null
    ? null
    : el('span', { className: 'from-key' }, home.startsWith('job:') ? 'from a job without a key' : ['from key ', el('a', { href: keyHref(home) }, home)]);

/** The job's further limits besides the key on view (a guest's list names it too), as small badges. */
const limitBadges = (limits, key) => {
  const others = (limits ?? []).filter((k) => k !== key);
  if (others.length === 0) return null;
  return el('span', { className: 'limits' }, el('span', { className: 'visually-hidden' }, 'also under limits: '), others.map((k) => el('span', { className: 'badge limit-badge', title: `also under the limit of key ${k}` }, k)));
};

/** The Job cell: id and name, where a guest is from, and the job's further limits (one block, so a phone's cell keeps them together). */
const jobCellOf = (job, key) => el('div', {}, jobCell(job.jobId, job.name), fromKey(job.home ?? null), limitBadges(job.limits, key));

/** "waits on: t (5/5 full), api (paused)": the job's other limits that are full or paused now. */
const waitsOnText = (waitsOn) =>
  waitsOn && waitsOn.length > 0 ? `waits on: ${waitsOn.map((w) => `${w.key} (${w.paused ? 'paused' : `${w.inUse}/${w.limit} full`})`).join(', ')}` : null;

const renderHolders = (detail) => {
  $('holders-body').replaceChildren(
    ...detail.holders.map((h) =>
      el(
        'tr',
        { dataset: { job: h.jobId } },
        el('td', { dataset: { label: 'Job' } }, jobCellOf(h, detail.key)),
        el('td', { dataset: { label: 'Worker' } }, h.workerId ?? 'not started'),
        el('td', { dataset: { label: 'Since' } }, `${clock(h.acquiredAt)} (${h.how}, ${ago(h.acquiredAt)})`),
        el('td', { dataset: { label: 'Lease expiry' } }, `${clock(h.expiresAt)} (${fromNow(h.expiresAt)})`),
        el('td', { dataset: { label: 'Lease' } }, leaseBadge(h.leaseState)),
        el('td', { dataset: { label: 'Attempt' }, className: 'num' }, h.attempt === null ? '–' : String(h.attempt)),
        el('td', {}, actionable(h) ? el('button', { type: 'button', className: 'danger release', onclick: () => releaseHolder(detail.key, h) }, 'Release') : null),
      ),
    ),
  );
  $('holders-empty').hidden = detail.holders.length > 0;
  $('holders-table').hidden = detail.holders.length === 0;
  // Release all frees the key's own holders: a guest is released at its own key.
  $('release-all').hidden = ownJobs(detail.holders).length < 2;
};

const renderParked = (detail) => {
  $('parked-body').replaceChildren(
    ...detail.parked.map((p, i) =>
      el(
        'tr',
        { dataset: { job: p.jobId } },
        el('td', { dataset: { label: '#' }, className: 'num' }, String(i + 1)),
        el('td', { dataset: { label: 'Job' } }, jobCellOf(p, detail.key)),
        el('td', { dataset: { label: 'Priority' }, className: 'num' }, String(p.priority)),
        el('td', { dataset: { label: 'Waiting' } }, el('div', {}, duration(now() - p.parkedAt), waitsOnText(p.waitsOn) && el('span', { className: 'waits-on' }, waitsOnText(p.waitsOn)))),
        el('td', {}, actionable(p) ? el('button', { type: 'button', className: 'danger discard', onclick: () => discard(detail.key, p) }, 'Discard') : null),
      ),
    ),
  );
  $('parked-empty').hidden = detail.parked.length > 0;
  $('parked-table').hidden = detail.parked.length === 0;
  // As Release all: the key's own parked jobs.
  $('discard-all').hidden = ownJobs(detail.parked).length < 2;
};

const renderScheduled = (detail) => {
  $('scheduled-body').replaceChildren(
    ...detail.scheduled.map((s) =>
      el(
        'tr',
        {},
        el('td', { dataset: { label: 'Job' } }, jobCell(s.jobId, s.name)),
        el('td', { dataset: { label: 'Due' } }, `${clock(s.runAt)} (${fromNow(s.runAt)})`),
        el('td', { dataset: { label: 'Attempts so far' }, className: 'num' }, String(s.attempts)),
      ),
    ),
  );
  $('scheduled-empty').hidden = detail.scheduled.length > 0;
  $('scheduled-table').hidden = detail.scheduled.length === 0;
};

const renderHandoffs = (detail) => {
  $('handoffs').replaceChildren(
    ...detail.handoffs.map((h) => {
      const held = h.releasedAt === null ? `holding for ${duration(now() - h.acquiredAt)}` : `held ${duration(h.releasedAt - h.acquiredAt)}`;
      const how = h.how === 'promoted' ? `promoted after ${duration(h.parkedMs)} parked` : 'acquired at once';
      const why = h.releasedAt === null ? 'still held' : [REASONS[h.reason] ?? h.reason, h.by ? `by ${h.by}` : null, h.error ? `: ${h.error}` : null].filter(Boolean).join(' ');
      // A guest's worker, attempt and the who or what of its release are in its own key's audit.
      const who = h.home === undefined ? `worker ${h.workerId ?? '–'}${h.attempt === null ? '' : `, attempt ${h.attempt}`}` : 'worker and attempt at its own key';
      return el(
        'li',
        { className: `handoff reason-${h.reason ?? 'held'}`, dataset: { job: h.jobId } },
        el('div', { className: 'handoff-head' }, el('code', { className: 'job-id' }, h.jobId), fromKey(h.home ?? null), limitBadges(h.limits, detail.key), el('span', { className: 'badge' }, why)),
        el('div', { className: 'handoff-body' }, `${how}; ${who}; ${held} (${clock(h.acquiredAt)} → ${h.releasedAt === null ? 'now' : clock(h.releasedAt)})`),
      );
    }),
  );
  $('handoffs-empty').hidden = detail.handoffs.length > 0;
};

const renderDetail = (detail) => {
  $('key-missing').hidden = true;
  $('key-body').hidden = false;
  $('key-quarantine').hidden = detail.quarantine === null;
  setText('key-quarantine', detail.quarantine === null ? '' : quarantineText(detail.quarantine));
  $('key-paused').hidden = detail.paused === null;
  setText('key-paused', detail.paused === null ? '' : `Paused by ${detail.paused.by} ${fromNow(detail.paused.at)}${detail.paused.reason ? `: ${detail.paused.reason}` : ''}. Nothing new is admitted: holders finish, parked jobs keep their order.`);
  setText('pause-toggle', detail.paused === null ? 'Pause key' : 'Resume key');
  setText('key-summary', `${detail.holders.length} / ${detail.limit} slots held · ${detail.parked.length} parked · ${detail.scheduled.length} scheduled · lease ${duration(detail.leaseMs)}`);
  const limit = $('limit-input');
  if (document.activeElement !== limit) limit.value = String(detail.limit);
  limit.dataset.current = String(detail.limit);
  renderHolders(detail);
  renderParked(detail);
  renderScheduled(detail);
  renderHandoffs(detail);
};

// ---- refresh and navigation ----------------------------------------------------

const keyOfHash = () => {
  const params = new URLSearchParams(location.hash.slice(1));
  const key = params.get('key');
  return key === null || key === '' ? null : key;
};

let detail = null;

const refresh = async () => {
  try {
    const data = await getJson('/api/keys');
    state.keys = data.keys;
    renderTotals(data.totals);
    renderKeys();
    const key = state.key;
    if (key !== null) {
      try {
        const d = await getJson(`/api/keys/detail?key=${encodeURIComponent(key)}`);
        if (state.key === key) renderDetail((detail = d));
      } catch (error) {
        if (!(error instanceof ApiError) || error.status !== 404) throw error;
        detail = null;
        $('key-missing').hidden = false;
        $('key-quarantine').hidden = true;
        $('key-body').hidden = true;
        setText('key-summary', '');
      }
    }
    setText('status', `updated ${new Date().toLocaleTimeString()}`);
    $('status').classList.remove('stale');
  } catch (error) {
    setText('status', `cannot refresh: ${error.message}`);
    $('status').classList.add('stale');
  }
};

const showKey = () => {
  state.key = keyOfHash();
  detail = null;
  const view = $('key-view');
  view.hidden = state.key === null;
  if (state.key !== null) {
    setText('key-title', state.key);
    setText('key-summary', 'loading…');
    for (const id of ['holders-body', 'parked-body', 'scheduled-body', 'handoffs']) $(id).replaceChildren();
    view.scrollIntoView({ block: 'start' });
  }
  return refresh();
};

let timer;
const loop = async () => {
  clearTimeout(timer);
  if (!document.hidden) await refresh();
  timer = setTimeout(loop, REFRESH_MS);
};

const wire = () => {
  for (const th of document.querySelectorAll('#keys-table th[data-sort]')) {
    th.querySelector('button').addEventListener('click', () => {
      const by = th.dataset.sort;
      state.sort = { by, dir: state.sort.by === by ? -state.sort.dir : 1 };
      renderKeys();
    });
  }
  $('filter').addEventListener('input', (e) => {
    state.filter = e.target.value;
    renderKeys();
  });
  $('only-at-limit').addEventListener('change', (e) => {
    state.onlyAtLimit = e.target.checked;
    renderKeys();
  });
  $('token-button').addEventListener('click', () => askToken());
  $('release-all').addEventListener('click', () => detail && releaseAll(detail.key, detail.holders));
  $('discard-all').addEventListener('click', () => detail && discard(detail.key, null));
  $('limit-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (!detail) return;
    const key = detail.key;
    const limit = Number($('limit-input').value);
    const current = Number($('limit-input').dataset.current);
    act(
      {
        title: `Change the limit of “${key}” from ${current} to ${limit}?`,
        text:
          limit > current
            ? `Up to ${limit - current} parked job${limit - current === 1 ? '' : 's'} can be promoted at once.`
            : 'Jobs holding slots keep them; no new job of the key starts until fewer than the new limit hold one.',
        warning: null,
        confirm: 'Change limit',
      },
      () => postJson('/api/keys/limit', { key, limit }),
      (r) => `Limit of ${key} is now ${r.limit}${r.promoted.length ? `; promoted ${r.promoted.length}` : ''}.`,
    );
  });
  $('pause-toggle').addEventListener('click', () => {
    if (!detail) return;
    const key = detail.key;
    const pausing = detail.paused === null;
    act(
      pausing
        ? { title: `Pause “${key}”?`, text: 'No new job of the key starts until it is resumed; jobs holding slots finish, parked jobs keep their order.', warning: null, confirm: 'Pause key' }
        : { title: `Resume “${key}”?`, text: `Its free slots go to the ${detail.parked.length} parked job${detail.parked.length === 1 ? '' : 's'} at once, in their order.`, warning: null, confirm: 'Resume key' },
      () => postJson(pausing ? '/api/keys/pause' : '/api/keys/resume', { key }),
      (r) => (pausing ? `${key} is paused.` : `${key} runs again${r.promoted.length ? `; promoted ${r.promoted.length}` : ''}.`),
    );
  });
  window.addEventListener('hashchange', showKey);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden) loop();
  });
};

wire();
showKey().then(() => {
  timer = setTimeout(loop, REFRESH_MS);
});

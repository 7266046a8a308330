// What every part of the dashboard renders with: elements built as text (never parsed as HTML),
// the language of the moment, times on the server's clock, the API, toasts and the page's own
// confirmation. app.js puts the page together; workers.js, dead-jobs.js and job-view.js render
// their sections with these, one way of rendering for the whole page.

import { CATALOGUE, LANGUAGES } from './i18n.js';
import { pickLanguage, translator } from './format.js';

const TOKEN_STORAGE = 'jobledger.token';
const LANGUAGE_STORAGE = 'jobledger.language';
/** How long a success stays in view; an error stays until dismissed. */
const TOAST_MS = 6000;
/** Job ids a confirmation names before "and N more". */
const LISTED_IDS = 5;

export const $ = (id) => document.getElementById(id);

/** An element with attributes/properties and children (strings become text nodes). */
export const el = (tag, props = {}, ...children) => {
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

export const setText = (id, text) => {
  $(id).textContent = text;
};

// ---- language ----------------------------------------------------------------

// A browser that refuses storage (a privacy mode) still gets a page, in its own language.
const stored = (() => {
  try {
    return localStorage.getItem(LANGUAGE_STORAGE);
  } catch {
    return null;
  }
})();

/** The translator of the language on view; a live binding, replaced by useLanguage. */
export let tr = translator(CATALOGUE, pickLanguage(stored, navigator.languages, LANGUAGES));
export const t = (key, params) => tr.t(key, params);

/** Switches the page's language and remembers it for this browser. */
export const useLanguage = (lang) => {
  tr = translator(CATALOGUE, lang);
  try {
    localStorage.setItem(LANGUAGE_STORAGE, lang);
  } catch {
    // Not remembered in a browser that refuses storage; the page still switches.
  }
};

/** The catalogue's text for `prefix.value` (a status, a state, an event type), or the value as the server says it when a newer server names one this page does not know. */
export const known = (prefix, value) => (`${prefix}.${value}` in CATALOGUE.en ? t(`${prefix}.${value}`) : value);

// ---- time ------------------------------------------------------------------

/** Server time minus this browser's, so ages are measured on the server's clock. */
let skew = 0;
export const now = () => Date.now() + skew;

export const age = (epochMs) => tr.duration(now() - epochMs);
export const ago = (epochMs) => (epochMs === null || epochMs === undefined ? '–' : t('time.ago', { duration: age(epochMs) }));
export const fromNow = (epochMs) => (epochMs === null || epochMs === undefined ? '–' : tr.relative(epochMs - now()));
export const clockWithRelative = (epochMs) => t('time.withRelative', { time: tr.clock(epochMs), relative: fromNow(epochMs) });

// ---- links ---------------------------------------------------------------------

export const keyHref = (key) => `#key=${encodeURIComponent(key)}`;
const jobHref = (jobId) => `#job=${encodeURIComponent(jobId)}`;

/** A job id linking to the job's view. */
export const jobLink = (jobId) => el('a', { href: jobHref(jobId), className: 'job-link', title: jobId }, el('code', { className: 'job-id' }, jobId));

/** A key linking to its view; a job without a key (its stream, job:<id>) is named so, unlinked. */
export const keyLink = (key) => (key === null || key.startsWith('job:') ? t('job.noKey') : el('a', { href: keyHref(key), className: 'key-link', title: key }, key));

// ---- holders -------------------------------------------------------------------

/**
 * A holder in words, whatever part of the page shows it: running on W (renewed N s ago),
 * admitted and not started for N s, lease expired, worker gone. `h`: state, workerId,
 * acquiredAt, renewedAt, expiresAt, workerLastSeen (as the key detail gives them).
 */
export const holderStateText = (h) => {
  switch (h.state) {
    case 'running':
      return h.renewedAt === null ? t('holder.runningOn', { worker: h.workerId }) : t('holder.running', { worker: h.workerId, ago: ago(h.renewedAt) });
    case 'unstarted':
      return t('holder.unstarted', { duration: age(h.acquiredAt) });
    case 'expired':
      return t('holder.expired', { ago: ago(h.expiresAt) });
    case 'worker-gone':
      return h.workerLastSeen === null ? t('holder.workerGoneNever', { worker: h.workerId }) : t('holder.workerGone', { worker: h.workerId, ago: ago(h.workerLastSeen) });
    default:
      return h.state;
  }
};

/**
 * The holder's state, and, while an operator's release or cancel waits for its handler to stop
 * (the slot passes on once it has, or its lease lapses), who asked.
 */
export const holderBadge = (h) => [
  el('span', { className: `badge holder-${h.state}` }, holderStateText(h)),
  h.revoked ? el('span', { className: 'badge holder-stopping' }, t(h.revoked.cancels ? 'holder.stoppingCancel' : 'holder.stoppingRelease', { by: h.revoked.by })) : null,
];

// ---- API -------------------------------------------------------------------

/** The server answered with an error: its message (English, the API's) is shown inside a translated frame. */
export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
  }
}

/** No answer at all: the server is down or the network is. */
export class Unreachable extends Error {}

/** The operator cancelled the token dialog. */
class NoToken extends Error {}

const send = async (path, init) => {
  try {
    return await fetch(path, init);
  } catch {
    throw new Unreachable();
  }
};

/** The token this tab keeps (null: none yet). */
export const storedToken = () => sessionStorage.getItem(TOKEN_STORAGE);

/**
 * Who the stored token stands for (POST /api/whoami): `{ name }` (null: the shared token), or
 * undefined when no token is stored or the server refuses or does not answer. It never asks for
 * a token: it is read in the background.
 */
export const whoIsToken = async () => {
  const token = storedToken();
  if (token === null) return { token, who: undefined };
  try {
    const response = await send('/api/whoami', { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${token}` }, body: '{}' });
    return { token, who: response.ok ? await response.json() : undefined };
  } catch {
    return { token, who: undefined };
  }
};

/** The dialog in view, if any: the reads of one refresh refused together ask for the token once. */
let asking = null;
/** Cancelled when a read asked: reads ask no more (every refresh would), until a token is given (the header's button). */
let readsDeclined = false;

/**
 * The last answer of each path read that came with an ETag: its URL, tag and body. The server's
 * answers are no-store (no HTTP cache keeps them), so the page revalidates on its own: the next
 * read of the same URL sends If-None-Match, and a 304 (nothing moved) reuses the body. One per
 * path, so a filter typed letter by letter keeps no more than one.
 */
const answers = new Map();

/**
 * GET `path` with the query `params` (undefined and '' left out), with the tab's token when it
 * has one: a server bound off loopback wants it for reads too. Refused for want of it (401), the
 * read asks for the token once and tries again. A 304 gives the body kept for the URL: its `now`
 * and ages are as of that answer (see src/adapters/http/etag.ts).
 */
export const getJson = async (path, params = {}) => {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== '')).toString();
  const url = query === '' ? path : `${path}?${query}`;
  const kept = answers.get(path);
  const revalidate = kept !== undefined && kept.url === url ? { 'if-none-match': kept.etag } : {};
  const read = (token) => send(url, { headers: { accept: 'application/json', ...revalidate, ...(token === null ? {} : { authorization: `Bearer ${token}` }) } });
  let response = await read(storedToken());
  if (response.status === 401 && !readsDeclined) {
    sessionStorage.removeItem(TOKEN_STORAGE);
    const token = await askToken();
    readsDeclined = token === null;
    if (token !== null) response = await read(token);
  }
  if (response.status === 304 && kept !== undefined) return kept.body;
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, body);
  const etag = response.headers.get('etag');
  if (etag === null) answers.delete(path);
  else answers.set(path, { url, etag, body });
  if (body && typeof body.now === 'number') skew = body.now - Date.now();
  return body;
};

/** Asks for the token in a dialog (one at a time: a second ask waits for the first); resolves to it, or null when cancelled. */
export const askToken = () => (asking ??= dialogToken().finally(() => (asking = null)));

const dialogToken = () =>
  new Promise((resolve) => {
    const dialog = $('token-dialog');
    const input = $('token-input');
    input.value = storedToken() ?? '';
    dialog.addEventListener(
      'close',
      () => {
        const token = input.value.trim();
        if (dialog.returnValue === 'ok' && token !== '') {
          sessionStorage.setItem(TOKEN_STORAGE, token);
          readsDeclined = false;
          resolve(token);
        } else resolve(null);
      },
      { once: true },
    );
    dialog.showModal();
    input.focus();
  });

/**
 * POSTs with the bearer token (asked for once per tab, and again when the server refuses it). No
 * `by` is sent: the server records the name of a named token (a `by` beside it is refused), and
 * the client's address for the shared one.
 */
export const postJson = async (path, body) => {
  let token = storedToken() ?? (await askToken());
  for (let tries = 0; token !== null && tries < 2; tries++) {
    const response = await send(path, {
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
  throw new NoToken();
};

/** A read whose 404 means "the server does not know it": null then. */
export const orMissing = async (read) => {
  try {
    return await read();
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null;
    throw error;
  }
};

export const describeError = (error) => {
  if (error instanceof ApiError) return t('error.refused', { error: error.message });
  if (error instanceof Unreachable) return t('error.unreachable');
  if (error instanceof NoToken) return t('error.noToken');
  return t('error.failed', { error: error.message });
};

// ---- toasts and confirmation -------------------------------------------------

/** The toasts in view, each re-rendered when the language changes. */
const toasts = new Set();

const paintToast = (toast) => {
  toast.text.textContent = toast.render();
  toast.dismiss.setAttribute('aria-label', t('toast.dismiss'));
};

export const repaintToasts = () => {
  for (const toast of toasts) paintToast(toast);
};

/** `render` gives the text in the current language; `kind` 'ok' fades after TOAST_MS, 'error' stays until dismissed. */
export const showToast = (render, kind) => {
  const toast = { render, text: el('p', { className: 'toast-text' }), dismiss: el('button', { type: 'button', className: 'quiet dismiss' }, '×') };
  toast.item = el('div', { className: `toast ${kind}` }, toast.text, toast.dismiss);
  const close = () => {
    clearTimeout(toast.timer);
    toast.item.remove();
    toasts.delete(toast);
  };
  toast.dismiss.addEventListener('click', close);
  if (kind === 'ok') toast.timer = setTimeout(close, TOAST_MS);
  paintToast(toast);
  toasts.add(toast);
  $('toasts').append(toast.item);
};

/**
 * A modal confirmation of the page's own (a <dialog>, not window.confirm); resolves true only when
 * the operator confirms. `jobIds` are named (the first few, then how many more of `count`, when
 * the page knows more jobs than it holds the ids of); a `danger` action gets a filled red button.
 * Focus starts on Cancel, the safe choice.
 */
const confirmAction = ({ title, paragraphs, jobIds = [], count = jobIds.length, warning = null, confirm, danger = false }) =>
  new Promise((resolve) => {
    const dialog = $('confirm');
    setText('confirm-title', title);
    $('confirm-text').replaceChildren(...paragraphs.filter(Boolean).map((text) => el('p', {}, text)));
    const list = $('confirm-list');
    const more = count - Math.min(jobIds.length, LISTED_IDS);
    list.replaceChildren(
      ...jobIds.slice(0, LISTED_IDS).map((id) => el('li', {}, el('code', { className: 'job-id', title: id }, id))),
      ...(more > 0 ? [el('li', { className: 'more' }, t('dialog.more', { count: more }))] : []),
    );
    list.setAttribute('aria-label', t('dialog.jobs'));
    list.hidden = jobIds.length === 0;
    const warn = $('confirm-warning');
    warn.textContent = warning ?? '';
    warn.hidden = !warning;
    const ok = $('confirm-ok');
    ok.textContent = confirm;
    ok.className = danger ? 'danger filled' : '';
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.returnValue = 'cancel';
    dialog.showModal();
    $('confirm-cancel').focus();
  });

/** What an action refreshes afterwards: the whole page (app.js sets it). */
let refreshAfter = async () => {};
export const refreshWith = (refresh) => {
  refreshAfter = refresh;
};

/** Confirms, runs the action, shows its result as a toast, refreshes. `describe` renders the result in the language of the moment. */
export const act = async (confirmation, run, describe) => {
  if (!(await confirmAction(confirmation))) return;
  try {
    const result = await run();
    showToast(() => describe(result), 'ok');
  } catch (error) {
    showToast(() => describeError(error), 'error');
  }
  await refreshAfter();
};

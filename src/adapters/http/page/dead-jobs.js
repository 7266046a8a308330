// Failed and dead jobs (GET /api/jobs, status dead and failed), filtered by key, name and queue
// (exact, as the API filters), read with the rest of the page at each refresh (app.js). Dead jobs
// can be selected and retried (each runs again with fresh attempts) or discarded (off the list
// for good); a failed job waits for its retry already, so it is listed, not acted on.

import { $, act, ApiError, ago, el, fromNow, getJson, jobLink, keyLink, known, postJson, t } from './ui.js';

/**
 * Each status's newest this many; the filter narrows the rest down. Read at every refresh, beside
 * the keys: 100 of each made a third of a refresh's bytes (bench:reads, 33.5 KB of 50 KB).
 */
const SHOWN = 25;

const state = {
  filter: { key: '', name: '', queue: '' },
  dead: [],
  failed: [],
  /** More than SHOWN of a status match the filter. */
  more: false,
  /** The server refused the filter (400): its error, shown in the section; the rest of the page is unaffected. */
  refused: null,
  /** Ids of dead jobs ticked; only those still listed stay ticked. */
  selected: new Set(),
};

/** Reads both lists for the filter of the moment; a filter the server refuses empties them and says why. */
export const readDeadJobs = async () => {
  const query = { ...state.filter, limit: String(SHOWN) };
  try {
    const [dead, failed] = await Promise.all([getJson('/api/jobs', { ...query, status: 'dead' }), getJson('/api/jobs', { ...query, status: 'failed' })]);
    state.dead = dead.jobs;
    state.failed = failed.jobs;
    state.more = dead.nextCursor !== null || failed.nextCursor !== null;
    state.refused = null;
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 400)) throw error;
    Object.assign(state, { dead: [], failed: [], more: false, refused: error });
  }
  const listed = new Set(state.dead.map((j) => j.jobId));
  for (const id of state.selected) if (!listed.has(id)) state.selected.delete(id);
};

const cell = (label, className, ...children) => el('td', { dataset: { label: t(label) }, className }, ...children);

/** `kind`: the list the job came from, dead or failed (a failed job's status is `scheduled`: it waits for its retry). */
const row = (job, kind) => {
  const dead = kind === 'dead';
  return el(
    'tr',
    { dataset: { job: job.jobId }, className: state.selected.has(job.jobId) ? 'selected' : undefined },
    el(
      'td',
      {},
      dead
        ? el('input', {
            type: 'checkbox',
            className: 'pick',
            'aria-label': t('dead.select', { job: job.jobId }),
            checked: state.selected.has(job.jobId),
            onchange: (e) => {
              if (e.target.checked) state.selected.add(job.jobId);
              else state.selected.delete(job.jobId);
              renderDeadJobs();
            },
          })
        : null,
    ),
    cell('col.job', undefined, el('div', {}, jobLink(job.jobId), el('span', { className: 'job-name' }, job.name))),
    cell('col.key', undefined, keyLink(job.key), el('span', { className: 'job-name' }, t('dead.onQueue', { queue: job.queue }))),
    cell('col.status', undefined, el('span', { className: `badge status-${kind}` }, known('jobStatus', kind))),
    cell('col.attempts', 'num', t('dead.attempts', { attempts: job.attempts, max: job.maxAttempts })),
    cell('col.lastError', 'error-text', job.lastError ?? job.finishReason ?? '–'),
    cell('col.when', undefined, dead ? t('dead.finished', { ago: ago(job.finishedAt) }) : t('dead.retryAt', { when: fromNow(job.runAt) })),
  );
};

export const renderDeadJobs = () => {
  const jobs = [...state.dead, ...state.failed];
  $('dead-summary').textContent = t('dead.summary', { dead: state.dead.length, failed: state.failed.length });
  $('dead-body').replaceChildren(...state.dead.map((job) => row(job, 'dead')), ...state.failed.map((job) => row(job, 'failed')));
  $('dead-table').hidden = jobs.length === 0;
  const empty = $('dead-empty');
  empty.hidden = jobs.length > 0;
  empty.textContent = state.refused ? t('dead.refused', { error: state.refused.message }) : Object.values(state.filter).some((v) => v !== '') ? t('dead.noMatch') : t('dead.none');
  $('dead-more').hidden = !state.more;
  $('dead-more').textContent = t('dead.newest', { count: SHOWN });
  const all = $('dead-all');
  all.checked = state.dead.length > 0 && state.dead.every((j) => state.selected.has(j.jobId));
  all.disabled = state.dead.length === 0;
  const n = state.selected.size;
  $('dead-retry').disabled = n === 0;
  $('dead-discard').disabled = n === 0;
  $('dead-retry').textContent = t('dead.retry', { count: n });
  $('dead-discard').textContent = t('dead.discard', { count: n });
};

/** The ticked jobs in the order they are listed (newest first), as the confirmation names them. */
const selectedIds = () => state.dead.map((j) => j.jobId).filter((id) => state.selected.has(id));

const settled = (ids) => {
  for (const id of ids) state.selected.delete(id);
};

const retrySelected = () => {
  const jobIds = selectedIds();
  return act(
    { title: t('retry.title', { count: jobIds.length }), paragraphs: [t('retry.text', { count: jobIds.length })], jobIds, confirm: t('retry.confirm', { count: jobIds.length }) },
    async () => {
      const result = await postJson('/api/jobs/retry', { jobIds });
      settled(jobIds);
      return result;
    },
    (r) => t('done.retried', { count: r.retried.length, acquired: r.retried.filter((j) => j.status === 'acquired').length, parked: r.retried.filter((j) => j.status === 'parked').length }),
  );
};

const discardSelected = () => {
  const jobIds = selectedIds();
  return act(
    { title: t('discardDead.title', { count: jobIds.length }), paragraphs: [t('discardDead.text', { count: jobIds.length })], jobIds, confirm: t('discardAll.confirm', { count: jobIds.length }), danger: true },
    async () => {
      const result = await postJson('/api/jobs/discard-dead', { jobIds });
      settled(jobIds);
      return result;
    },
    (r) => t('done.discardedDead', { count: r.discarded.length }),
  );
};

/** `refresh` reads the page again (app.js), once the filter changed. */
export const wireDeadJobs = (refresh) => {
  $('dead-filter').addEventListener('submit', (e) => {
    e.preventDefault();
    for (const field of ['key', 'name', 'queue']) state.filter[field] = $(`dead-filter-${field}`).value.trim();
    state.selected.clear();
    refresh();
  });
  $('dead-all').addEventListener('change', (e) => {
    for (const job of state.dead) {
      if (e.target.checked) state.selected.add(job.jobId);
      else state.selected.delete(job.jobId);
    }
    renderDeadJobs();
  });
  $('dead-retry').addEventListener('click', () => state.selected.size > 0 && retrySelected());
  $('dead-discard').addEventListener('click', () => state.selected.size > 0 && discardSelected());
};

// Who is doing the work: the workers (GET /api/workers), live and gone, and the dispatch queues
// (GET /api/queues), read with the rest of the page at each refresh (app.js). A queue with
// messages and no live worker reading it is flagged: nothing will take its jobs. Each worker's
// row names the jobs it runs (the first few the server names, then how many more).

import { $, age, el, jobLink, keyLink, now, t, tr } from './ui.js';

/** Gone workers shown before the rest fold under "show N more": the latest of them tell the story of an incident. */
const GONE_SHOWN = 3;

let showAllGone = false;

const cell = (label, className, ...children) => el('td', { dataset: { label: t(label) }, className }, ...children);

/** The jobs a worker runs, each linked with its key, then how many more; '–' for none. */
const runningJobs = (w) => {
  if (w.runningJobCount === 0) return '–';
  const more = w.runningJobCount - w.runningJobs.length;
  return el(
    'ul',
    { className: 'worker-jobs' },
    w.runningJobs.map((j) => el('li', { dataset: { job: j.jobId } }, jobLink(j.jobId), ' ', el('span', { className: 'job-key' }, keyLink(j.key)))),
    more > 0 ? el('li', { className: 'more' }, t('workers.moreJobs', { count: more })) : null,
  );
};

// `seenAgoMs` is as of the answer (`answeredAt`, the server's `now` then): a kept answer (304) is older.
const workerRow = (w, sinceAnswer) =>
  el(
    'tr',
    { className: w.state === 'gone' ? 'gone' : undefined, dataset: { worker: w.id } },
    cell('col.worker', undefined, el('code', { className: 'worker-id', title: w.id }, w.id)),
    cell('col.workerState', undefined, el('span', { className: `badge worker-${w.state}` }, t(w.state === 'live' ? 'worker.live' : w.stoppedAt === null ? 'worker.silent' : 'worker.stopped'))),
    cell('col.host', undefined, t('worker.hostPid', { host: w.host, pid: String(w.pid) })),
    cell('col.queue', undefined, el('code', { className: 'queue-name', title: w.queue }, w.queue)),
    cell('col.concurrency', 'num', tr.number(w.concurrency)),
    cell('col.started', undefined, tr.clock(w.startedAt)),
    cell('col.lastSeen', undefined, t('time.ago', { duration: tr.duration(w.seenAgoMs + sinceAnswer) })),
    cell('col.running', 'num', tr.number(w.running)),
    cell('col.holding', 'num', tr.number(w.holding)),
    cell('col.runningJobs', undefined, runningJobs(w)),
  );

const renderWorkerTable = (workers, answeredAt) => {
  const live = workers.filter((w) => w.state === 'live');
  const gone = workers.filter((w) => w.state !== 'live');
  const shown = showAllGone ? gone : gone.slice(0, GONE_SHOWN);
  setSummary(live.length, gone.length);
  const sinceAnswer = Math.max(0, now() - answeredAt);
  $('workers-body').replaceChildren(...[...live, ...shown].map((w) => workerRow(w, sinceAnswer)));
  $('workers-table').hidden = workers.length === 0;
  $('workers-empty').hidden = workers.length > 0;
  const folded = gone.length - GONE_SHOWN;
  const toggle = $('workers-more');
  toggle.hidden = folded <= 0;
  toggle.textContent = showAllGone ? t('workers.fewer') : t('workers.more', { count: Math.max(folded, 0) });
};

const setSummary = (live, gone) => {
  $('workers-summary').textContent = `${t('workers.summaryLive', { count: live })} · ${t('workers.summaryGone', { count: gone })}`;
  $('workers-summary').classList.toggle('alert', live === 0);
};

/** No live worker reads a queue that has messages: they wait for nobody. */
const unserved = (q) => q.depth > 0 && q.consumers === 0;

const queueRow = (q) =>
  el(
    'tr',
    { className: unserved(q) ? 'alert' : undefined, dataset: { queue: q.queue } },
    cell('col.queue', undefined, el('code', { className: 'queue-name', title: q.queue }, q.queue), unserved(q) ? el('span', { className: 'badge no-consumer-badge' }, t('queue.noConsumer')) : null),
    cell('col.depth', 'num', tr.number(q.depth)),
    cell('col.visibleNow', 'num', tr.number(q.visibleNow)),
    cell('col.oldestMessage', undefined, q.oldestAt === null ? '–' : age(q.oldestAt)),
    cell('col.consumers', undefined, t('queue.consumers', { count: q.consumers, capacity: q.capacity })),
  );

const renderQueueTable = (queues) => {
  $('queues-body').replaceChildren(...queues.map(queueRow));
  $('queues-table').hidden = queues.length === 0;
  $('queues-empty').hidden = queues.length > 0;
};

/** `answeredAt`: the `now` of the answer the workers came in. */
export const renderWorkers = (workers, queues, answeredAt) => {
  renderWorkerTable(workers, answeredAt);
  renderQueueTable(queues);
};

/** `render` re-renders the page (app.js) once the fold of gone workers opens or closes. */
export const wireWorkers = (render) => {
  $('workers-more').addEventListener('click', () => {
    showAllGone = !showAllGone;
    render();
  });
};

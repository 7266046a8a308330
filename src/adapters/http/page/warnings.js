// "Needs attention" (GET /api/keys `warnings`): one line per cause however many keys it touches
// (the server groups them: src/adapters/http/routes/warnings.ts), said from its kind and figures
// in the page's language; one key or queue named in a sentence of its own, more counted with the
// first few named under it, each a link to its key's view.

import { $, age, el, keyLink, t, tr } from './ui.js';

/** The first few keys or queues of a warning (nodes), then how many more: the count is the server's, over all of them. */
const warnedList = (named, count) => [
  ' ',
  el('span', { className: 'warned' }, ...named.flatMap((node, i) => [i > 0 ? ', ' : '', node]), named.length < count ? ` ${t('dialog.more', { count: count - named.length })}` : ''),
];

const warnedKeys = (w) => warnedList(w.keys.map((k) => keyLink(k.key)), w.count);

const queueSentence = (q) => tr.parts('warning.queueWithoutConsumer', { queue: el('code', { className: 'queue-name', title: q.queue }, q.queue), count: q.depth, duration: q.oldestAt === null ? '–' : age(q.oldestAt) });

/**
 * One warning per cause, said from its kind and figures (its `message` is English): one key or
 * queue is named in a sentence of its own; more are counted, the first few named under it.
 */
const warningItem = (w) => {
  const one = w.count === 1;
  const key = one && w.keys ? keyLink(w.keys[0].key) : null;
  switch (w.kind) {
    case 'queue-without-consumer': {
      if (one) return queueSentence(w.queues[0]);
      const named = w.queues.map((q) => el('span', {}, ...tr.parts('warning.queueDepth', { queue: el('code', { className: 'queue-name', title: q.queue }, q.queue), count: q.depth })));
      return [t('warning.queuesWithoutConsumer', { count: w.count }), ...warnedList(named, w.count)];
    }
    case 'holders-unstarted': {
      const said = one ? tr.parts('warning.unstarted', { key, count: w.holders, duration: age(w.since) }) : [t('warning.unstartedKeys', { count: w.count, duration: age(w.since) })];
      // The queue nobody reads (warned of above) is why they are not started.
      const why = w.unreadQueues.length > 0 ? ` ${t('warning.unreadQueues', { count: w.unreadQueues.length, queues: w.unreadQueues.join(', ') })}` : '';
      return [...said, why, ...(one ? [] : warnedKeys(w))];
    }
    case 'holders-worker-gone':
      return one ? tr.parts('warning.workerGone', { key, count: w.holders }) : [t('warning.workerGoneKeys', { count: w.count }), ...warnedKeys(w)];
    case 'holders-expired':
      return one ? tr.parts('warning.expired', { key, count: w.holders }) : [t('warning.expiredKeys', { count: w.count }), ...warnedKeys(w)];
    case 'key-quarantined':
      return one ? tr.parts('warning.quarantined', { key }) : [t('warning.quarantinedKeys', { count: w.count }), ...warnedKeys(w)];
    default:
      return [w.message];
  }
};

/** The API's warnings (GET /api/keys `warnings`) into the "needs attention" strip. */
export const renderWarnings = (warnings) => {
  $('warnings').hidden = warnings.length === 0;
  $('warnings-list').replaceChildren(...warnings.map((w) => el('li', { dataset: { kind: w.kind } }, warningItem(w))));
};

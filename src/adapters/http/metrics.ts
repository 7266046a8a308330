import type { FastifyInstance } from 'fastify';
import { Gauge, Histogram, Registry } from 'prom-client';
import type { Ledger } from '../ledger.js';
import { watchEventLoop } from './event-loop-holds.js';
import { HOLDER_STATES } from '../postgres/queries/holder-state.js';
import { TOP_KEYS, type LedgerMetrics } from '../postgres/queries/ledger-metrics.js';
import { JobStatus } from '../postgres/queries/list-jobs.js';
import type { QueueRow } from '../postgres/queries/queues.js';

// GET /metrics: the dashboard's figures in Prometheus text format (prom-client), read fresh on each
// scrape: one statement for the read models, workers, projection lag and ledger size, one for the
// queues; and the sweeper's tick lag, observed as it ticks. Bounded: no series per key, only totals,
// per queue and per state figures, and the TOP_KEYS keys of two rankings (a key drops out of them
// as soon as it ranks lower).

/** How often the event loop is sampled (ms) for jobledger_event_loop_delay_*: prom-client's default for its own figure. */
const EVENT_LOOP_SAMPLE_MS = 10;

type Figures = LedgerMetrics & { readonly queueMetrics: readonly QueueRow[] };

export const registerMetrics = (app: FastifyInstance, ledger: Ledger): void => {
  const projections = ledger.projections;
  const registry = new Registry();
  const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[], set: (g: Gauge<L>, f: Figures) => void) => {
    const g = new Gauge<L>({ name: `jobledger_${name}`, help, labelNames, registers: [registry] });
    return (f: Figures) => {
      // Labelled series are rebuilt each scrape, so a queue or status that is gone stops being reported.
      if (labelNames.length > 0) g.reset();
      set(g, f);
    };
  };
  const setters = [
    gauge('keys', 'Concurrency keys known to the ledger.', [], (g, f) => g.set(f.keys)),
    gauge('keys_at_limit', 'Keys whose slots are all held: a new job of the key would park.', [], (g, f) => g.set(f.keysAtLimit)),
    gauge('keys_quarantined', 'Keys (and jobs without a key, each a stream of its own) with an event a reader cannot decode: their commands are refused, their jobs wait, their read models are held back (see jl_quarantined).', [], (g, f) =>
      g.set(f.quarantinedStreams),
    ),
    gauge('keys_paused', 'Keys an operator paused: nothing new is admitted on them until resumed (holders finish).', [], (g, f) => g.set(f.pausedKeys)),
    gauge('slots_held', 'Slots held now (one per holder and lease).', [], (g, f) => g.set(f.slotsHeld)),
    gauge('slots_lease_expired', 'Held slots whose lease has run out, not yet reclaimed by the sweeper.', [], (g, f) => g.set(f.slotsExpired)),
    gauge('parked_jobs', 'Jobs parked, waiting for a slot of their key.', [], (g, f) => g.set(f.parked)),
    gauge('limit_guests', 'Jobs under the limit of a key other than their own (stacked limits), one per job and limit key, over all keys: holding one of its slots, or parked in its line.', ['state'], (g, f) => {
      g.set({ state: 'holding' }, f.guestsHolding);
      g.set({ state: 'parked' }, f.guestsParked);
    }),
    gauge('oldest_parked_age_seconds', 'How long the longest-waiting parked job has waited (0 when none).', [], (g, f) => g.set(f.oldestParkedSeconds)),
    gauge('jobs', 'Jobs by status (jobs read model).', ['status'], (g, f) => {
      // Every status, 0 included, so a rate or an alert on one never sees its series vanish.
      for (const status of Object.keys(JobStatus.keys)) g.set({ status }, f.jobsByStatus[status] ?? 0);
    }),
    gauge('queue_depth', 'Jobs of the dispatch queue holding a slot (waiting to be claimed, or running).', ['queue'], (g, f) => {
      for (const m of f.queueMetrics) g.set({ queue: m.queue }, m.depth);
    }),
    gauge('queue_visible_messages', 'Admitted jobs of the queue a worker could claim now.', ['queue'], (g, f) => {
      for (const m of f.queueMetrics) g.set({ queue: m.queue }, m.visibleNow);
    }),
    gauge('queue_oldest_message_age_seconds', 'How long the oldest admitted job nobody started has waited to be claimed (0 when none waits).', ['queue'], (g, f) => {
      for (const m of f.queueMetrics) g.set({ queue: m.queue }, (m.oldestAgeMs ?? 0) / 1000);
    }),
    gauge('queue_consumers', 'Live workers reading the dispatch queue (0 with messages waiting: nobody takes them).', ['queue'], (g, f) => {
      for (const m of f.queueMetrics) g.set({ queue: m.queue }, m.consumers);
    }),
    gauge('workers', 'Workers by presence: live (heartbeat seen within 3 periods), gone (stopped or silent; kept for a day).', ['state'], (g, f) => {
      g.set({ state: 'live' }, f.workersLive);
      g.set({ state: 'gone' }, f.workersGone);
    }),
    gauge('holders', 'Held slots by holder state: running (on a live worker), unstarted (admitted, no worker started it), expired (lease ran out), worker-gone (started by a worker gone now).', ['state'], (g, f) => {
      for (const state of HOLDER_STATES) g.set({ state }, f.holdersByState[state]);
    }),
    gauge('top_key_parked_jobs', `Parked jobs of the ${TOP_KEYS} keys with the most (own and guests); the other keys have no series.`, ['key'], (g, f) => {
      for (const k of f.topParked) g.set({ key: k.key }, k.parked);
    }),
    gauge('top_key_oldest_parked_age_seconds', `How long the longest-parked job has waited, for the ${TOP_KEYS} keys where it is longest; the other keys have no series.`, ['key'], (g, f) => {
      for (const k of f.topWaiting) g.set({ key: k.key }, k.oldestParkedSeconds);
    }),
    gauge('ledger_events', 'Events of the ledger by table: events (live) and events_archive (jobs `jobledger archive` moved out), estimated from the catalog (rows of appends and appends_archive, pg_class.reltuples scaled to their pages, times the events of their newest rows).', ['table'], (g, f) => {
      g.set({ table: 'events' }, f.ledgerEvents);
      g.set({ table: 'events_archive' }, f.archivedEvents);
    }),
    gauge('ledger_bytes', 'Size of each ledger table (events: appends, events_archive: appends_archive) with its indexes and TOAST (pg_total_relation_size).', ['table'], (g, f) => {
      g.set({ table: 'events' }, f.ledgerBytes);
      g.set({ table: 'events_archive' }, f.archivedBytes);
    }),
    gauge('projection_lag_events', 'Events recorded but not yet applied by the projection (0 for inline projections).', ['projection', 'mode'], (g, f) => {
      for (const l of f.projectionLag) g.set({ projection: l.projection, mode: ledger.projectionMode }, l.events);
    }),
    gauge('projection_lag_seconds', 'Age of the oldest event not yet applied by the projection (0 for inline projections).', ['projection', 'mode'], (g, f) => {
      for (const l of f.projectionLag) g.set({ projection: l.projection, mode: ledger.projectionMode }, l.seconds);
    }),
  ];
  // This process's own figure, observed as each tick starts: nothing to read at the scrape.
  const tickLag = new Histogram({
    name: 'jobledger_sweeper_tick_lag_seconds',
    help: "How late each of this process's sweeper ticks started against its schedule (the previous tick's end plus the sweep interval): the event loop kept it waiting, and no lease expired or due job was admitted meanwhile.",
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
    registers: [registry],
  });
  const tickLagMax = new Gauge({ name: 'jobledger_sweeper_tick_lag_max_seconds', help: 'The latest any sweeper tick of this process started since it started (see jobledger_sweeper_tick_lag_seconds).', registers: [registry] });
  tickLagMax.set(0);
  let lagMaxSeconds = 0;
  ledger.onSweeperTickLag((lagMs) => {
    const seconds = lagMs / 1000;
    tickLag.observe(seconds);
    if (seconds > lagMaxSeconds) tickLagMax.set((lagMaxSeconds = seconds));
  });
  // How long this process's event loop was held (event-loop-holds.ts): a request or a tick that
  // runs that long keeps every other request and the sweeper waiting. Taken at each scrape: the
  // figures are since the previous one.
  const loop = watchEventLoop(EVENT_LOOP_SAMPLE_MS);
  app.addHook('onClose', async () => loop.stop());
  const delayMax = new Gauge({
    name: 'jobledger_event_loop_delay_max_seconds',
    help: `The longest this process's event loop was held since the previous scrape (sampled every ${EVENT_LOOP_SAMPLE_MS} ms): no request was answered and no sweeper tick ran meanwhile.`,
    registers: [registry],
  });
  const delayP99 = new Gauge({ name: 'jobledger_event_loop_delay_p99_seconds', help: "The 99th percentile of the event loop's holds since the previous scrape (see jobledger_event_loop_delay_max_seconds).", registers: [registry] });
  const observeDelay = () => {
    const { maxS, p99S } = loop.take();
    delayMax.set(maxS);
    delayP99.set(p99S);
  };
  const read = async (): Promise<Figures> => {
    const async = ledger.projectionMode === 'async' ? projections : [];
    const [figures, queueMetrics] = await Promise.all([ledger.metrics(async), ledger.queues()]);
    // Inline projections apply in the append's transaction: never behind.
    const projectionLag = async.length > 0 ? figures.projectionLag : projections.map((projection) => ({ projection, events: 0, seconds: 0 }));
    return { ...figures, queueMetrics, projectionLag };
  };
  // Scrapes take turns: each sets every gauge, then renders them; interleaved, one could render
  // another's half-set figures.
  let turn: Promise<unknown> = Promise.resolve();
  app.get('/metrics', async (_request, reply) => {
    const scrape = turn.then(async () => {
      const figures = await read();
      for (const set of setters) set(figures);
      observeDelay();
      return registry.metrics();
    });
    turn = scrape.catch(() => undefined);
    const text = await scrape;
    return reply.type(registry.contentType).send(text);
  });
};

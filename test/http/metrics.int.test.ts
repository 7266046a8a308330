import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyStream } from '../../src/domain/streams.js';
import { recheckWriterQuarantines } from '../../src/projections/quarantine.js';
import { appendByHand, fixByHand, namesPlace } from '../support/bad-events.js';
import { until } from '../support/until.js';
import { startTestServer, type TestServer } from './support.js';

// GET /metrics: Prometheus text with the dashboard's figures.

/** The value of one series, e.g. sample(text, 'jobledger_jobs', { status: 'parked' }). */
const sample = (text: string, name: string, labels: Record<string, string> = {}): number | undefined => {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    const m = /^([a-z_0-9]+)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = m[2] ? m[2].split(',') : [];
    if (wanted.every((w) => have.includes(w)) && have.length === wanted.length) return Number(m[3]);
  }
  return undefined;
};

const scrape = async (s: TestServer) => {
  const response = await fetch(`${s.url}/metrics`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toContain('text/plain');
  return response.text();
};

describe('GET /metrics, inline projections', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer();
    await s.ledger.enqueueMany([
      { name: 'm', key: 'm/1', limit: 1, jobId: 'm-1' },
      { name: 'm', key: 'm/1', jobId: 'm-2' },
      { name: 'm', key: 'm/1', jobId: 'm-3' },
      { name: 'm', key: 'm 2', limit: 2, jobId: 'm-4' },
      { name: 'm', key: 'm 2', jobId: 'm-5', delayMs: 3_600_000 },
      { name: 'm', key: 'm 3', limit: 1, jobId: 'm-6', queue: 'mail' },
    ]);
  });
  afterAll(() => s.close());

  it('slots held, parked, oldest parked age, keys at limit, jobs by status, queue depth and age; no lag inline', async () => {
    const text = await scrape(s);
    expect(text).toContain('# HELP jobledger_slots_held');
    expect(text).toContain('# TYPE jobledger_slots_held gauge');
    expect(sample(text, 'jobledger_keys')).toBe(3);
    expect(sample(text, 'jobledger_keys_at_limit')).toBe(2);
    expect(sample(text, 'jobledger_slots_held')).toBe(3);
    expect(sample(text, 'jobledger_slots_lease_expired')).toBe(0);
    expect(sample(text, 'jobledger_parked_jobs')).toBe(2);
    expect(sample(text, 'jobledger_oldest_parked_age_seconds')).toBeGreaterThanOrEqual(0);
    expect(sample(text, 'jobledger_jobs', { status: 'holding' })).toBe(3);
    expect(sample(text, 'jobledger_jobs', { status: 'parked' })).toBe(2);
    expect(sample(text, 'jobledger_jobs', { status: 'scheduled' })).toBe(1);
    expect(sample(text, 'jobledger_jobs', { status: 'completed' })).toBe(0);
    expect(sample(text, 'jobledger_queue_depth', { queue: 'default' })).toBe(2);
    expect(sample(text, 'jobledger_queue_depth', { queue: 'mail' })).toBe(1);
    expect(sample(text, 'jobledger_queue_visible_messages', { queue: 'mail' })).toBe(1);
    expect(sample(text, 'jobledger_queue_oldest_message_age_seconds', { queue: 'mail' })).toBeGreaterThanOrEqual(0);
    for (const projection of ['read_models', 'dispatcher']) {
      expect(sample(text, 'jobledger_projection_lag_events', { projection, mode: 'inline' })).toBe(0);
      expect(sample(text, 'jobledger_projection_lag_seconds', { projection, mode: 'inline' })).toBe(0);
    }
  });

  it('follows the ledger: after a release the figures change', async () => {
    await s.start('m/1', 'm-1');
    await s.ledger.release({ key: 'm/1', jobId: 'm-1', by: 'test' });
    await s.stopped('m/1', 'm-1');
    const text = await scrape(s);
    expect(sample(text, 'jobledger_parked_jobs')).toBe(1);
    expect(sample(text, 'jobledger_slots_held')).toBe(3);
  });

  it('jobledger_keys_quarantined counts the streams with an event a reader cannot decode, and drops once it decodes again', async () => {
    expect(sample(await scrape(s), 'jobledger_keys_quarantined')).toBe(0);
    const placed = await appendByHand(s.db.pool, keyStream('m 3'), 'an unknown type');
    await expect(s.ledger.execute(keyStream('m 3'), { type: 'SetLimit', limit: 2, by: 'test' })).rejects.toMatchObject(namesPlace(placed));
    expect(sample(await scrape(s), 'jobledger_keys_quarantined')).toBe(1);
    await fixByHand(s.db.pool, placed);
    expect(await recheckWriterQuarantines(s.db.pool, Date.now())).toEqual([keyStream('m 3')]);
    expect(sample(await scrape(s), 'jobledger_keys_quarantined')).toBe(0);
  });

  it('concurrent scrapes each get whole figures', async () => {
    const texts = await Promise.all(Array.from({ length: 5 }, () => scrape(s)));
    for (const text of texts) expect(sample(text, 'jobledger_slots_held')).toBe(3);
  });
});

describe('GET /metrics, async projections', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ inlineProjections: false });
  });
  afterAll(() => s.close());

  it('lag counts the events recorded past each projection\'s checkpoint, and drops to 0 once the runners catch up', async () => {
    await s.ledger.enqueueMany([
      { name: 'm', key: 'lag', limit: 1, jobId: 'l-1' },
      { name: 'm', key: 'lag', jobId: 'l-2' },
    ]);
    const events = await s.eventCount();
    const behind = await scrape(s);
    for (const projection of ['read_models', 'dispatcher']) {
      expect(sample(behind, 'jobledger_projection_lag_events', { projection, mode: 'async' })).toBe(events);
      expect(sample(behind, 'jobledger_projection_lag_seconds', { projection, mode: 'async' })).toBeGreaterThanOrEqual(0);
    }
    s.ledger.start();
    const deadline = Date.now() + 20_000;
    let text = behind;
    while (sample(text, 'jobledger_projection_lag_events', { projection: 'read_models', mode: 'async' }) !== 0 || sample(text, 'jobledger_projection_lag_events', { projection: 'dispatcher', mode: 'async' }) !== 0) {
      if (Date.now() > deadline) throw new Error(`projections did not catch up:\n${text}`);
      await sleep(50);
      text = await scrape(s);
    }
    expect(sample(text, 'jobledger_projection_lag_seconds', { projection: 'read_models', mode: 'async' })).toBe(0);
    expect(sample(text, 'jobledger_slots_held')).toBe(1);
    expect(sample(text, 'jobledger_parked_jobs')).toBe(1);
  });
});

describe("GET /metrics, this process's own figures", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ sweepIntervalMs: 50 });
  });
  afterAll(() => s.close());

  const LAG = 'jobledger_sweeper_tick_lag_seconds';
  const MAX = 'jobledger_sweeper_tick_lag_max_seconds';

  it('observes how late each tick started: an event loop blocked past a tick\'s time shows in the histogram and the max', async () => {
    const idle = await scrape(s);
    expect(idle).toContain(`# TYPE ${LAG} histogram`);
    expect(sample(idle, `${LAG}_count`)).toBe(0);
    expect(sample(idle, MAX)).toBe(0);
    s.ledger.start();
    await until(() => scrape(s), (text) => sample(text, `${LAG}_count`)! >= 1, 'a tick after the first');
    // Blocked 300 ms with the next tick due within 50: it starts at least 250 ms late. A tick in
    // flight when the block began schedules the next one only after it: then block again.
    let text = '';
    for (let tries = 0; tries < 5 && !(sample(text, MAX)! >= 0.25); tries++) {
      const end = performance.now() + 300;
      while (performance.now() < end);
      await sleep(20);
      text = await scrape(s);
    }
    const ticks = sample(text, `${LAG}_count`)!;
    expect(sample(text, MAX)).toBeGreaterThanOrEqual(0.25);
    expect(sample(text, MAX)).toBeLessThan(5);
    expect(ticks).toBeGreaterThanOrEqual(2);
    expect(sample(text, `${LAG}_bucket`, { le: '0.1' })).toBeLessThan(ticks);
    expect(sample(text, `${LAG}_bucket`, { le: '+Inf' })).toBe(ticks);
  });

  const LOOP_MAX = 'jobledger_event_loop_delay_max_seconds';
  const LOOP_P99 = 'jobledger_event_loop_delay_p99_seconds';

  it('shows how long the event loop was held since the previous scrape: a 200 ms block in the max, gone at the scrape after', async () => {
    const first = await scrape(s);
    expect(first).toContain(`# TYPE ${LOOP_MAX} gauge`);
    const end = performance.now() + 200;
    while (performance.now() < end);
    await sleep(30);
    const blocked = await scrape(s);
    expect(sample(blocked, LOOP_MAX)).toBeGreaterThanOrEqual(0.18);
    expect(sample(blocked, LOOP_MAX)).toBeLessThan(5);
    expect(sample(blocked, LOOP_P99)).toBeLessThanOrEqual(sample(blocked, LOOP_MAX)!);
    await sleep(50);
    const after = await scrape(s);
    expect(sample(after, LOOP_MAX)).toBeLessThan(0.18);
  });
});

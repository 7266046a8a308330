import { readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyStream } from '../../src/domain/streams.js';
import { appendByHand, namesPlace } from '../support/bad-events.js';
import { startTestServer, type TestServer } from './support.js';

// GET /: the dashboard's files, served from the package with a strict Content-Security-Policy.

let s: TestServer;

beforeAll(async () => {
  s = await startTestServer();
});

afterAll(async () => {
  await s.close();
});

const PAGE_DIR = new URL('../../src/adapters/http/page/', import.meta.url);

describe('the page', () => {
  it.each([
    ['/', 'text/html', 'app.js'],
    ['/app.js', 'text/javascript', 'textContent'],
    ['/app.css', 'text/css', '@media (max-width'],
    ['/i18n.js', 'text/javascript', 'CATALOGUE'],
    ['/format.js', 'text/javascript', 'Intl.PluralRules'],
    ['/ui.js', 'text/javascript', 'textContent'],
    ['/warnings.js', 'text/javascript', 'renderWarnings'],
    ['/workers.js', 'text/javascript', 'renderWorkers'],
    ['/dead-jobs.js', 'text/javascript', '/api/jobs/retry'],
    ['/job-view.js', 'text/javascript', '/api/jobs/explain'],
  ])('GET %s: %s from the package, scripts and requests limited to this server', async (path, type, contains) => {
    const response = await fetch(`${s.url}${path}`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain(type);
    const csp = response.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).toContain("default-src 'none'");
    expect(response.headers.get('x-content-type-options')).toBe('nosniff');
    expect(await response.text()).toContain(contains);
  });

  it('refers to nothing outside the server: no remote script, style, font or image, no inline script', () => {
    for (const file of readdirSync(PAGE_DIR)) {
      const text = readFileSync(new URL(file, PAGE_DIR), 'utf8');
      expect(text, file).not.toMatch(/https?:\/\//);
      expect(text, file).not.toMatch(/@import|@font-face|url\(/);
      if (file.endsWith('.html')) expect(text).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
      // Data goes on the page as text only.
      if (file.endsWith('.js')) expect(text).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
    }
  });

  it('a quarantined key: /api/keys gives its quarantine (revision, position, error, readers), and the page shows it in the keys list and the key view', async () => {
    await s.ledger.enqueue({ name: 'p', key: 'page-bad', limit: 1, jobId: 'page-bad-1' });
    await s.ledger.enqueue({ name: 'p', key: 'page-good', limit: 1, jobId: 'page-good-1' });
    const placed = await appendByHand(s.db.pool, keyStream('page-bad'), 'a known type missing a field');
    await expect(s.ledger.execute(keyStream('page-bad'), { type: 'SetLimit', limit: 2, by: 'test' })).rejects.toMatchObject(namesPlace(placed));
    const { body } = await s.get('/api/keys');
    const byKey = new Map(body.keys.map((k: { key: string; quarantine: unknown }) => [k.key, k.quarantine]));
    expect(byKey.get('page-good')).toBeNull();
    expect(byKey.get('page-bad')).toMatchObject({
      revision: placed.revision,
      position: `${placed.position.commit}/${placed.position.prepare}`,
      readers: ['writer'],
      error: expect.stringContaining('leaseId'),
      firstSeen: expect.any(Number),
    });
    expect((await s.ledger.keyDetail('page-bad'))?.quarantine).toEqual(byKey.get('page-bad'));
    const app = readFileSync(new URL('app.js', PAGE_DIR), 'utf8');
    expect(app).toMatch(/quarantineBadge\(k\.quarantine\)/);
    expect(app).toMatch(/setText\('key-quarantine'/);
    expect(readFileSync(new URL('index.html', PAGE_DIR), 'utf8')).toContain('id="key-quarantine"');
  });

  it('JSON reads are not cached', async () => {
    const response = await fetch(`${s.url}/api/keys`);
    expect(response.headers.get('cache-control')).toBe('no-store');
  });

  it('bound to loopback, refuses a request naming another host (DNS rebinding): 403 JSON; loopback names pass', async () => {
    const get = (host: string) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = request(`${s.url}/api/keys`, { headers: { host } }, (res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        });
        req.on('error', reject);
        req.end();
      });
    const evil = await get('attacker.example:7070');
    expect(evil.status).toBe(403);
    expect(JSON.parse(evil.body).error).toContain('attacker.example');
    expect((await get('127.0.0.2')).status).toBe(200);
    for (const host of ['localhost:7070', '127.0.0.1', '[::1]:7070']) expect((await get(host)).status).toBe(200);
  });
});

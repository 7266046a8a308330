import { readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

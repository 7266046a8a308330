import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';

// Regression (issue 25): `npm ci` warned EBADENGINE: cookie@2.0.2, which fastify's inject
// (light-my-request) requires, wants Node >= 22, and jobledger runs on Node 20. package.json's
// `overrides` gives light-my-request cookie 1.1.1 (Node >= 18), which has the stringifySetCookie
// it calls. An override holds in the root project alone: an application installing jobledger on
// Node 20 still gets cookie 2 and npm's warning, and it works there (Node 20.19 on requires an ES
// module such as cookie 2); test/package/install-from-tarball.e2e.test.ts installs it so.

const require = createRequire(import.meta.url);

/** The cookie light-my-request loads: resolved from its own place in node_modules. */
const cookieOfLightMyRequest = (): { version: string; engines: { node: string } } => {
  const fromLightMyRequest = createRequire(require.resolve('light-my-request'));
  return JSON.parse(readFileSync(fromLightMyRequest.resolve('cookie/package.json'), 'utf8'));
};

describe("fastify's inject on this Node", () => {
  it('gets a cookie whose engines take this Node', () => {
    const { engines } = cookieOfLightMyRequest();
    const least = Number(/^>=\s*(\d+)/.exec(engines.node)?.[1]);
    expect(least).toBeLessThanOrEqual(Number(process.versions.node.split('.')[0]));
  });

  it('sends the cookies it is given (light-my-request serialises them with cookie)', async () => {
    const app = Fastify();
    app.get('/', async (request) => ({ cookie: request.headers.cookie ?? null }));
    const response = await app.inject({ method: 'GET', url: '/', cookies: { session: 'a b', theme: 'dark' } });
    expect(response.json()).toEqual({ cookie: 'session=a%20b; theme=dark' });
    await app.close();
  });
});

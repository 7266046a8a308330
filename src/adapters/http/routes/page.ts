import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';

// The dashboard: static files shipped in the package (src/adapters/http/page), read once at start
// from `../page/`: `npm run build` copies them there for tsc's output (dist/src/adapters/http) and
// for the CLI's bundle (dist/cli, whose chunks are in dist/cli/chunks: rolldown.config.ts).
// Nothing is fetched from elsewhere. app.js imports the page's sections (warnings.js,
// workers.js, dead-jobs.js, job-view.js), what they render with (ui.js), the string catalogue
// (i18n.js) and its formatting (format.js) as modules of their own.

const ASSETS = {
  '/': ['index.html', 'text/html; charset=utf-8'],
  '/app.js': ['app.js', 'text/javascript; charset=utf-8'],
  '/ui.js': ['ui.js', 'text/javascript; charset=utf-8'],
  '/warnings.js': ['warnings.js', 'text/javascript; charset=utf-8'],
  '/workers.js': ['workers.js', 'text/javascript; charset=utf-8'],
  '/dead-jobs.js': ['dead-jobs.js', 'text/javascript; charset=utf-8'],
  '/job-view.js': ['job-view.js', 'text/javascript; charset=utf-8'],
  '/format.js': ['format.js', 'text/javascript; charset=utf-8'],
  '/i18n.js': ['i18n.js', 'text/javascript; charset=utf-8'],
  '/app.css': ['app.css', 'text/css; charset=utf-8'],
} as const;

/** The page's own files: they hold no data, and need no token even where reads do (auth.ts). */
export const PAGE_FILES: readonly string[] = Object.keys(ASSETS);

/**
 * Scripts, styles and requests from this server only, no inline script, no framing: even a
 * rendering slip could not run a script a key name smuggled in.
 */
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

export const registerPage = (app: FastifyInstance): void => {
  for (const [path, [file, type]] of Object.entries(ASSETS)) {
    const body = readFileSync(new URL(`../page/${file}`, import.meta.url));
    app.get(path, async (_request, reply) =>
      reply.type(type).header('content-security-policy', CSP).header('referrer-policy', 'no-referrer').header('cache-control', 'no-cache').send(body),
    );
  }
};

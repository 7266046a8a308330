import type { FastifyInstance } from 'fastify';

/**
 * The routes a server registers, as `METHOD /path` (HEAD left out: fastify answers it for every
 * GET), read from fastify's own route tree (printRoutes): each line is a path segment under the
 * one above it, `(GET, HEAD, POST)` its methods; a line it does not understand throws.
 */
export const registeredRoutes = (app: FastifyInstance): Set<string> => {
  const routes = new Set<string>();
  const stack: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const m = /^((?:[│ ] {3})*)[├└]── (\S*)(?: \(([A-Z, ]+)\))?$/.exec(line);
    if (m === null) {
      if (line.trim() !== '') throw new Error(`printRoutes line not understood (fastify changed its format?): ${JSON.stringify(line)}`);
      continue;
    }
    const depth = m[1]!.length / 4;
    stack.length = depth;
    const path = (stack[depth - 1] ?? '') + m[2]!;
    stack[depth] = path;
    // A segment without methods only joins those below it.
    for (const method of m[3]?.split(', ') ?? []) if (method !== 'HEAD') routes.add(`${method} ${path}`);
  }
  return routes;
};

import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isJobDefinition, type HandlerMap } from './define-job.js';

/**
 * Loads a handlers module (ESM or CommonJS): its default export, or its named exports, mapping job
 * names to functions or defineJob() definitions. Fails naming the path when nothing usable is there.
 */
export const loadHandlers = async (path: string): Promise<HandlerMap> => {
  const url = pathToFileURL(resolve(path)).href;
  let module: Record<string, unknown>;
  try {
    module = (await import(url)) as Record<string, unknown>;
  } catch (error) {
    throw new Error(`--handlers: cannot load ${path}: ${(error as Error).message}`, { cause: error });
  }
  const exported = (typeof module.default === 'object' && module.default !== null ? module.default : module) as Record<string, unknown>;
  const handlers = Object.fromEntries(Object.entries(exported).filter(([, v]) => typeof v === 'function' || isJobDefinition(v)));
  if (Object.keys(handlers).length === 0) {
    throw new Error(`--handlers: ${path} exports no handler (export default { jobName: async (args, ctx) => { … } })`);
  }
  return handlers as HandlerMap;
};

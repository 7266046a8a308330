import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ValidationError } from '../../domain/values.js';
import { isJobDefinition, type HandlerMap } from './define-job.js';

/**
 * Loads a handlers module (ESM or CommonJS): its default export, or its named exports, mapping job
 * names to functions or defineJob() definitions. A module that cannot be used is bad input (a
 * ValidationError of field `handlers`), naming the path as given and as resolved, and why: not
 * found, threw on import, or exports no handler.
 */
export const loadHandlers = async (path: string): Promise<HandlerMap> => {
  const resolved = resolve(path);
  const named = resolved === path ? path : `${path} (resolved to ${resolved})`;
  const unusable = (why: string) => new ValidationError('handlers', `${named}: ${why}`);
  const file = await stat(resolved).catch(() => null);
  if (file === null) throw unusable('not found');
  if (!file.isFile()) throw unusable('not a file');
  let module: Record<string, unknown>;
  try {
    module = (await import(pathToFileURL(resolved).href)) as Record<string, unknown>;
  } catch (error) {
    // A syntax error's message may carry the offending source after its first line.
    const message = error instanceof Error ? (error.message.split('\n')[0] ?? '') : String(error);
    throw Object.assign(unusable(`threw on import: ${message}`), { cause: error });
  }
  const exported = (typeof module.default === 'object' && module.default !== null ? module.default : module) as Record<string, unknown>;
  const handlers = Object.fromEntries(Object.entries(exported).filter(([, v]) => typeof v === 'function' || isJobDefinition(v)));
  if (Object.keys(handlers).length === 0) throw unusable('exports no handler (export default { jobName: async (args, ctx) => { … } })');
  return handlers as HandlerMap;
};

import { describe, expect, it } from 'vitest';
import { serializeError } from '../../../src/adapters/logging/logger.js';
import { TransientWriteError } from '../../../src/domain/ports/ledger-store.js';

/** What pg hands to the pool's 'error' listener: the error, with the whole client hanging off it. */
const pgError = () =>
  Object.assign(new Error('terminating connection due to administrator command'), {
    name: 'error',
    code: '57P01',
    severity: 'FATAL',
    client: { connectionParameters: { host: '127.0.0.1' }, prepared: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`s${i}`, 'SELECT '.repeat(40)])) },
  });

describe('serializeError (regression: each lost connection logged about 10 KB, the pg client with every prepared statement)', () => {
  it('keeps the message, the code and the query name of a database error, and nothing it drags along', () => {
    const serialized = serializeError(Object.assign(pgError(), { query: 'jl_write_flush' }));
    expect(serialized).toEqual({ type: 'error', message: 'terminating connection due to administrator command', code: '57P01', query: 'jl_write_flush' });
    expect(JSON.stringify(serialized).length).toBeLessThan(200);
  });

  it('drops the stack of our own error that only wraps a database one, and keeps its cause short', () => {
    const serialized = serializeError(new TransientWriteError('terminating connection due to administrator command', { cause: pgError() }));
    expect(serialized).toEqual({
      type: 'TransientWriteError',
      message: 'terminating connection due to administrator command',
      cause: { type: 'error', message: 'terminating connection due to administrator command', code: '57P01' },
    });
  });

  it('keeps the stack of an error of our own code (a bug needs it)', () => {
    const serialized = serializeError(new TypeError('x is undefined')) as { stack?: string };
    expect(serialized.stack).toContain('TypeError: x is undefined');
  });

  it('passes a value that is not an error through', () => {
    expect(serializeError('just a string')).toBe('just a string');
  });
});

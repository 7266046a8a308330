import fc from 'fast-check';
import * as t from 'io-ts';
import { describe, expect, it } from 'vitest';
import { closedObject, decodeInput, IntegerString } from '../../src/adapters/http/input.js';
import { Key, Limit, ValidationError } from '../../src/domain/values.js';

const Body = closedObject({ key: Key }, { limit: Limit, tags: t.array(Key) });

const errorOf = (input: unknown): ValidationError => {
  try {
    decodeInput(Body, input, '(body)');
  } catch (error) {
    if (error instanceof ValidationError) return error;
    throw error;
  }
  throw new Error('accepted');
};

describe('decodeInput with a closed object', () => {
  it('accepts the known fields, required and optional', () => {
    expect(decodeInput(Body, { key: 'k' }, '(body)')).toEqual({ key: 'k' });
    expect(decodeInput(Body, { key: 'k', limit: 2, tags: ['a'] }, '(body)')).toEqual({ key: 'k', limit: 2, tags: ['a'] });
  });

  it.each([
    [{}, 'key', 'is required'],
    [{ key: 1 }, 'key', 'non-empty string'],
    [{ key: 'k', limit: 0 }, 'limit', 'from 1'],
    [{ key: 'k', tags: ['a', ''] }, 'tags[1]', 'non-empty'],
    [{ key: 'k', jobid: 'x' }, 'jobid', 'not a known field'],
    [null, '(body)', 'JSON object'],
    [[], '(body)', 'JSON object'],
    ['k', '(body)', 'JSON object'],
  ])('%j is refused naming %s', (input, field, problem) => {
    const error = errorOf(input);
    expect(error.field).toBe(field);
    expect(error.message).toContain(problem);
  });

  it('property: any field it does not know is refused, named, whatever the rest', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1 }).filter((f) => !['key', 'limit', 'tags', '__proto__'].includes(f)),
        fc.jsonValue(),
        fc.option(fc.string({ minLength: 1 }), { nil: undefined }),
        (field, value, key) => {
          const input = { ...(key === undefined ? {} : { key }), [field]: value };
          expect(errorOf(input).field).toBe(field);
        },
      ),
    );
  });
});

describe('IntegerString', () => {
  it('reads query-string integers, refuses anything else', () => {
    expect(IntegerString.decode('50')).toEqual({ _tag: 'Right', right: 50 });
    expect(IntegerString.decode('-3')).toEqual({ _tag: 'Right', right: -3 });
    for (const bad of ['', '1.5', '1e3', 'ten', ' 5', 5, null]) expect(IntegerString.decode(bad)._tag).toBe('Left');
  });
});

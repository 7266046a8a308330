import * as E from 'fp-ts/lib/Either.js';
import * as t from 'io-ts';
import { describe, expect, it } from 'vitest';
import { planEnqueue, type EnqueueInput } from '../../src/commands/enqueue.js';
import { Actor, JobId, JsonArgs, Key, MAX_ARGS_BYTES, MAX_JSON_DEPTH, Name, Text, ValidationError, checkField, escapeUnstorable } from '../../src/domain/values.js';

// What PostgreSQL text/jsonb and JSON cannot store is refused by the value codecs themselves, so
// every entry point (library, HTTP, CLI) refuses it, naming the field.

const NOW = Date.UTC(2026, 10, 30, 3, 0, 0);

const errorOf = (run: () => unknown): ValidationError => {
  try {
    run();
  } catch (error) {
    if (error instanceof ValidationError) return error;
    throw error;
  }
  throw new Error('accepted');
};

/** `[[[…]]]` nested `depth` deep, built without recursion. */
const nestedArrays = (depth: number): unknown => {
  let value: unknown = [];
  for (let i = 1; i < depth; i++) value = [value];
  return value;
};

const UNSTORABLE = [
  ['a NUL at the start', '\u0000key', 'NUL'],
  ['a NUL inside', 'ke\u0000y', 'NUL'],
  ['a NUL at the end', 'key\u0000', 'NUL'],
  ['a lone high surrogate', 'a\ud800b', 'lone UTF-16 surrogate (U+D800'],
  ['a lone high surrogate at the end', 'ab\udbff', 'lone UTF-16 surrogate (U+DBFF'],
  ['a lone low surrogate', 'a\udc00', 'lone UTF-16 surrogate (U+DC00'],
  ['a pair in the wrong order', '\udc00\ud800', 'lone UTF-16 surrogate'],
] as const;

describe('strings PostgreSQL cannot store', () => {
  it.each(UNSTORABLE)('%s is refused in every string codec, naming the field', (_what, value, problem) => {
    for (const [field, codec] of [
      ['key', Key],
      ['name', Name],
      ['jobId', JobId],
      ['by', Actor],
      ['cursor', Text],
    ] as const) {
      const error = errorOf(() => checkField(field, codec, value));
      expect(error.field).toBe(field);
      expect(error.message).toContain(`${field}: must not contain a ${problem}`);
    }
  });

  it('accepts astral characters (a proper surrogate pair), U+FFFD and other control characters', () => {
    for (const value of ['🔑', 'ключ:日本語:🔑', '\ufffd', 'tab\there', 'new\nline', '\udbff\udfff']) {
      expect(checkField('key', Key, value)).toBe(value);
      expect(checkField('name', Name, value)).toBe(value);
    }
  });

  it('a key with a lone surrogate is refused, so it cannot merge with the key that has U+FFFD there', () => {
    expect(errorOf(() => planEnqueue({ name: 'x', key: 'tenant\ud800' }, NOW)).field).toBe('key');
    expect(planEnqueue({ name: 'x', key: 'tenant\ufffd' }, NOW).key).toBe('tenant\ufffd');
  });

  it.each([
    [{ name: 'x\u0000' }, 'name'],
    [{ name: 'x', key: '\u0000' }, 'key'],
    [{ name: 'x', jobId: 'j\ud800' }, 'jobId'],
    [{ name: '\udfff' }, 'name'],
  ])('planEnqueue(%j) is refused naming %s, with the job index in a batch', (input, field) => {
    expect(errorOf(() => planEnqueue(input as EnqueueInput, NOW)).field).toBe(field);
    expect(errorOf(() => planEnqueue(input as EnqueueInput, NOW, 'jobs[3].')).field).toBe(`jobs[3].${field}`);
  });
});

describe('escapeUnstorable (text that came from elsewhere, such as a handler\'s error)', () => {
  it('writes NUL and lone surrogates as escapes, and leaves everything else, surrogate pairs included, as it was', () => {
    expect(escapeUnstorable('a\u0000b \ud800 c \udc00 d 😀 é')).toBe('a\\u0000b \\ud800 c \\udc00 d 😀 é');
    expect(Text.is(escapeUnstorable('x\u0000\udfff'))).toBe(true);
  });
});

describe('JsonArgs', () => {
  const argsError = (args: unknown): ValidationError => errorOf(() => checkField('args', JsonArgs, args));

  it.each([
    ['a NUL in a string', { a: { b: 'x\u0000' } }, 'args.a.b', 'must not contain a NUL'],
    ['a NUL in a property name', { a: { 'b\u0000': 1 } }, 'args.a', 'has a property name with a NUL'],
    ['a lone surrogate in an array', { list: ['ok', '\ud83d'] }, 'args.list[1]', 'must not contain a lone UTF-16 surrogate'],
    ['a lone surrogate in a property name', { '\udc00': 1 }, 'args', 'has a property name with a lone UTF-16 surrogate'],
    ['a NUL as the whole of args', '\u0000', 'args', 'must not contain a NUL'],
    ['a bigint', { n: 1n }, 'args.n', 'is a bigint'],
    ['a function', [() => 1], 'args[0]', 'is a function'],
    ['a symbol', { s: Symbol('s') }, 'args.s', 'is a symbol'],
    ['NaN', [1, Number.NaN], 'args[1]', 'is NaN'],
    ['Infinity', { x: Number.POSITIVE_INFINITY }, 'args.x', 'is Infinity'],
    ['a class instance', { when: new Map() }, 'args.when', 'is a Map'],
    ['undefined in an array', [1, undefined], 'args[1]', 'is undefined'],
    // eslint-disable-next-line no-sparse-arrays
    ['a hole in an array', [1, , 3], 'args[1]', 'is undefined'],
  ])('refuses %s, naming the place (%s)', (_what, args, field, problem) => {
    const error = argsError(args);
    expect(error.field).toBe(field);
    expect(error.problem).toContain(problem);
  });

  it('refuses a cycle, and accepts the same object twice side by side', () => {
    const cycle: Record<string, unknown> = { a: { b: 1 } };
    (cycle.a as Record<string, unknown>).back = cycle;
    expect(argsError(cycle)).toMatchObject({ field: 'args.a.back', problem: expect.stringContaining('a cycle') });
    const shared = { n: 1 };
    expect(checkField('args', JsonArgs, { x: shared, y: [shared, shared] })).toEqual({ x: { n: 1 }, y: [{ n: 1 }, { n: 1 }] });
  });

  it(`accepts nesting ${MAX_JSON_DEPTH} deep, refuses one more (arrays and objects)`, () => {
    expect(E.isRight(JsonArgs.decode(nestedArrays(MAX_JSON_DEPTH)))).toBe(true);
    expect(argsError(nestedArrays(MAX_JSON_DEPTH + 1)).problem).toBe(`is nested more than ${MAX_JSON_DEPTH} deep`);
    let object: unknown = 1;
    for (let i = 0; i < MAX_JSON_DEPTH + 1; i++) object = { a: object };
    const error = argsError(object);
    expect(error.field).toBe(`args${'.a'.repeat(MAX_JSON_DEPTH)}`);
    expect(error.problem).toContain('nested more than');
  });

  it('refuses args nested 10,000 and 1,000,000 deep with an answer, not a stack overflow', () => {
    for (const depth of [10_000, 1_000_000]) expect(argsError(nestedArrays(depth)).problem).toContain('nested more than');
  });

  it('a subtree shared along 2^60 paths is refused as too large, quickly (not walked forever)', () => {
    let value: unknown = 'leaf';
    for (let i = 0; i < 60; i++) value = [value, value];
    const started = Date.now();
    expect(argsError(value).problem).toContain(`more than ${MAX_ARGS_BYTES} bytes`);
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('a bad value deep in a command is named with its whole path through the codecs', () => {
    const Command = t.type({ jobs: t.array(t.type({ args: JsonArgs })) });
    expect(errorOf(() => checkField('command', Command, { jobs: [{ args: 1 }, { args: { a: ['\u0000'] } }] })).field).toBe('command.jobs[1].args.a[0]');
  });

  it('planEnqueue names the place inside args', () => {
    expect(errorOf(() => planEnqueue({ name: 'x', args: { to: ['a@example.com', 'b\u0000'] } }, NOW)).field).toBe('args.to[1]');
  });
});

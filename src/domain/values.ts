import * as E from 'fp-ts/lib/Either.js';
import * as t from 'io-ts';

// The checked values commands are made of. Each failure message says what was expected, and
// reportErrors names the field it came from.

/**
 * A codec that narrows `base` with a check: `problemOf` says what is wrong with a value, or
 * undefined when it is fine. When `base` fails, the failure says `expected` (so a number where a
 * key belongs says what a key must be; a missing value stays "is required").
 */
const refineWith = <A>(base: t.Type<A, A, unknown>, name: string, expected: string, problemOf: (a: A) => string | undefined): t.Type<A, A, unknown> =>
  new t.Type<A, A, unknown>(
    name,
    (u): u is A => base.is(u) && problemOf(u) === undefined,
    (u, c) => {
      const decoded = base.validate(u, c);
      if (E.isLeft(decoded)) return u === undefined ? decoded : t.failure<A>(u, c, expected);
      const problem = problemOf(decoded.right);
      return problem === undefined ? decoded : t.failure<A>(u, c, problem);
    },
    t.identity,
  );

/** `refineWith` for a check with one message. */
export const refine = <A>(base: t.Type<A, A, unknown>, name: string, ok: (a: A) => boolean, message: string): t.Type<A, A, unknown> =>
  refineWith(base, name, message, (a) => (ok(a) ? undefined : message));

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * What in a string PostgreSQL text and jsonb cannot store, or undefined: NUL (refused by both) and
 * a lone UTF-16 surrogate (jsonb refuses its escape; as text the driver's UTF-8 encoding turns it
 * into U+FFFD, so two different keys would become one).
 */
const unstorable = (s: string): string | undefined => {
  const nul = s.indexOf('\u0000');
  if (nul >= 0) return `a NUL character (U+0000, at index ${nul}), which PostgreSQL cannot store`;
  const lone = LONE_SURROGATE.exec(s);
  if (lone) return `a lone UTF-16 surrogate (U+${lone[0].charCodeAt(0).toString(16).toUpperCase()}, at index ${lone.index}), which UTF-8 cannot encode`;
  return undefined;
};

/** `s` with what PostgreSQL cannot store (NUL, lone surrogates) written as `\uXXXX` escapes: text that came from elsewhere (a handler's error), kept as it read. */
export const escapeUnstorable = (s: string): string =>
  s.replace(new RegExp(`\u0000|${LONE_SURROGATE.source}`, 'g'), (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

const stringProblem = (s: string): string | undefined => {
  const what = unstorable(s);
  return what === undefined ? undefined : `must not contain ${what}`;
};

/** Any string PostgreSQL can store, the empty one too. */
export const Text = refineWith(t.string, 'Text', 'must be a string', stringProblem);

const isInt = (n: number) => Number.isSafeInteger(n);

export const MAX_NAME_LENGTH = 200;
export const MAX_KEY_LENGTH = 500;
/** Of a job id, and of who an operator action is recorded as done by. */
export const MAX_ID_LENGTH = 200;
export const MAX_LIMIT = 100_000;
/**
 * The lease floor. A worker renews every lease/3; under a second that leaves too little room for
 * a renewal's round trip and a GC pause, and a lease that lapses under a live worker lets another
 * job of the key start beside it.
 */
export const MIN_LEASE_MS = 1_000;
export const MAX_LEASE_MS = 24 * 3_600_000;
export const MAX_ATTEMPTS = 1_000;
export const MAX_ARGS_BYTES = 1_048_576;
/** Epoch-ms bounds a run time must fall in: years 2000 to 9999. */
const MIN_TIME = Date.UTC(2000, 0, 1);
const MAX_TIME = Date.UTC(9999, 11, 31);

/** Not blank, at most `max` characters, and storable by PostgreSQL (no NUL, no lone surrogate). */
export const NonEmptyString = (max: number) => {
  const expected = `must be a non-empty string of at most ${max} characters`;
  return refineWith(t.string, 'NonEmptyString', expected, (s) => (s.trim().length > 0 && s.length <= max ? stringProblem(s) : expected));
};

export const Name = NonEmptyString(MAX_NAME_LENGTH);
export const Key = NonEmptyString(MAX_KEY_LENGTH);
export const JobId = NonEmptyString(MAX_ID_LENGTH);
/** Who an operator action is recorded as done by. */
export const Actor = NonEmptyString(MAX_ID_LENGTH);
export const QueueName = refine(t.string, 'QueueName', (s) => /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$/.test(s), 'must be 1-63 letters, digits, "_", "." or "-"');
export const Limit = refine(t.number, 'Limit', (n) => isInt(n) && n >= 1 && n <= MAX_LIMIT, `must be an integer from 1 to ${MAX_LIMIT}`);
export const LeaseMs = refine(t.number, 'LeaseMs', (n) => isInt(n) && n >= MIN_LEASE_MS && n <= MAX_LEASE_MS, `must be an integer number of milliseconds from ${MIN_LEASE_MS} to ${MAX_LEASE_MS}`);
export const Priority = refine(t.number, 'Priority', (n) => isInt(n) && Math.abs(n) <= 2 ** 31, 'must be an integer (smaller runs first)');
export const MaxAttempts = refine(t.number, 'MaxAttempts', (n) => isInt(n) && n >= 1 && n <= MAX_ATTEMPTS, `must be an integer from 1 to ${MAX_ATTEMPTS}`);
export const Time = refine(t.number, 'Time', (n) => isInt(n) && n >= MIN_TIME && n <= MAX_TIME, 'must be a valid time');
export const Jitter = refine(t.number, 'Jitter', (n) => n >= 0 && n < 1, 'must be a number in [0, 1)');

/**
 * How deep JSON may nest: args deeper than this (counting args itself as depth 1) are refused.
 * Real arguments are a few levels deep; the bound keeps every reader of the ledger — the handler,
 * jsonb, JSON.stringify — far from a stack overflow.
 */
export const MAX_JSON_DEPTH = 64;

/** A JSON problem: where it is (property names and array indexes below the value) and what is wrong. */
interface JsonProblem {
  readonly at: readonly string[];
  readonly problem: string;
}

/** A value still to be checked, and how it was reached (for the path of a problem). */
interface Pending {
  readonly value: unknown;
  readonly parent: Pending | undefined;
  readonly key: string;
  readonly depth: number;
}

/** Marks where everything below `object` has been checked: it is no longer on the path. */
interface Exit {
  readonly exit: object;
}

const pathTo = (item: Pending): string[] => {
  const at: string[] = [];
  for (let p: Pending | undefined = item; p?.parent !== undefined; p = p.parent) at.push(p.key);
  return at.reverse();
};

/** Why `value` itself (not what it holds) cannot be stored as JSON, or undefined. */
const valueProblem = (value: unknown): string | undefined => {
  if (value === null || typeof value === 'boolean') return undefined;
  if (typeof value === 'string') return stringProblem(value);
  if (typeof value === 'number') return Number.isFinite(value) ? undefined : `is ${value}, which JSON cannot hold`;
  if (typeof value !== 'object') return `is a ${typeof value}, which JSON cannot hold`;
  const proto = Object.getPrototypeOf(value);
  if (!Array.isArray(value) && proto !== Object.prototype && proto !== null) {
    return `is a ${proto?.constructor?.name ?? 'non-plain object'}; pass plain objects, arrays, strings, numbers, booleans or null`;
  }
  return undefined;
};

/**
 * Why `u` is not JSON that survives a round trip through jsonb unchanged, or undefined when it is.
 * A walk with an explicit stack, not recursion: input nested thousands deep gets an answer, not
 * a stack overflow.
 */
const jsonProblem = (u: unknown): JsonProblem | undefined => {
  const stack: (Pending | Exit)[] = [{ value: u, parent: undefined, key: '', depth: 1 }];
  // The objects on the path to the one being checked: meeting one again is a cycle (the same
  // object twice side by side is fine).
  const ancestors = new Set<object>();
  // Every value takes at least a byte of JSON, so more than MAX_ARGS_BYTES of them is too large:
  // found before a subtree shared along many paths makes the walk endless.
  let values = 0;
  while (stack.length > 0) {
    const item = stack.pop()!;
    if ('exit' in item) {
      ancestors.delete(item.exit);
      continue;
    }
    const fail = (problem: string, at = pathTo(item)): JsonProblem => ({ at, problem });
    if (++values > MAX_ARGS_BYTES) return fail(`holds more than ${MAX_ARGS_BYTES} values, so more than ${MAX_ARGS_BYTES} bytes of JSON`);
    const problem = valueProblem(item.value);
    if (problem !== undefined) return fail(problem);
    const value = item.value;
    if (typeof value !== 'object' || value === null) continue;
    if (ancestors.has(value)) return fail('refers back to itself (a cycle)');
    if (item.depth > MAX_JSON_DEPTH) return fail(`is nested more than ${MAX_JSON_DEPTH} deep`);
    ancestors.add(value);
    stack.push({ exit: value });
    const isArray = Array.isArray(value);
    // Array.from visits the holes of a sparse array too (as undefined).
    const children = isArray ? Array.from(value, (v: unknown, i) => [String(i), v] as const) : Object.entries(value);
    for (let i = children.length - 1; i >= 0; i--) {
      const [key, child] = children[i]!;
      if (isArray && child === undefined) return fail('is undefined, which JSON cannot hold', [...pathTo(item), key]);
      if (!isArray) {
        const what = unstorable(key);
        if (what !== undefined) return fail(`has a property name with ${what}`);
        // An undefined property is the same as an absent one.
        if (child === undefined) continue;
      }
      stack.push({ value: child, parent: item, key, depth: item.depth + 1 });
    }
  }
  return undefined;
};

/** `problem` as an io-ts failure at the path below the value the context is at, so the field named is `args.a[2]`. */
const failureAt = (u: unknown, c: t.Context, { at, problem }: JsonProblem): t.Validation<unknown> =>
  t.failure(u, [...c, ...at.map((key) => ({ key, type: JsonArgs, actual: undefined }))], problem);

/**
 * Job arguments: plain JSON (no functions, BigInts, cycles, class instances, NUL characters or
 * lone surrogates in strings or property names), nested at most MAX_JSON_DEPTH deep, at most
 * MAX_ARGS_BYTES.
 */
export const JsonArgs: t.Type<unknown, unknown, unknown> = new t.Type<unknown, unknown, unknown>(
  'JsonArgs',
  (u): u is unknown => jsonProblem(u) === undefined,
  (u, c) => {
    const problem = jsonProblem(u);
    if (problem) return failureAt(u, c, problem);
    const bytes = Buffer.byteLength(JSON.stringify(u));
    return bytes > MAX_ARGS_BYTES ? t.failure(u, c, `must be at most ${MAX_ARGS_BYTES} bytes of JSON (got ${bytes})`) : t.success(u);
  },
  t.identity,
);

/** One input error: the field at fault (a path such as `jobs[2].limit`) and what was wrong. */
export class ValidationError extends Error {
  override readonly name = 'ValidationError';
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(`${field}: ${problem}`);
  }
}

const isCombinator = (type: t.Decoder<unknown, unknown> | undefined) => type instanceof t.UnionType || type instanceof t.IntersectionType;

/** `jobs[2].limit`: the keys of the context, without the member indexes of unions and intersections. */
const pathOf = (context: t.Context): string =>
  context
    .filter((entry, i) => i > 0 && entry.key !== '' && !(/^\d+$/.test(entry.key) && isCombinator(context[i - 1]?.type)))
    .reduce((path, { key }) => (/^\d+$/.test(key) ? `${path}[${key}]` : path ? `${path}.${key}` : key), '');

/** The first decoding error as a ValidationError naming the field. */
export const firstError = (errors: t.Errors): ValidationError => {
  const [error] = errors;
  if (error === undefined) return new ValidationError('(input)', 'is invalid');
  const field = pathOf(error.context) || '(input)';
  const expected = error.context[error.context.length - 1]?.type.name ?? 'a valid value';
  return new ValidationError(field, error.message ?? (error.value === undefined ? 'is required' : `must be ${expected}`));
};

export const decodeWith = <A>(codec: t.Decoder<unknown, A>, input: unknown): E.Either<ValidationError, A> =>
  E.mapLeft(firstError)(codec.decode(input));

/** Decodes one named input, throwing a ValidationError that names it (and the path inside it). */
export const checkField = <A>(field: string, codec: t.Decoder<unknown, A>, value: unknown): A => {
  const decoded = decodeWith(codec, value);
  if (E.isRight(decoded)) return decoded.right;
  const inner = decoded.left.field;
  throw new ValidationError(inner === '(input)' ? field : /^\[/.test(inner) ? field + inner : `${field}.${inner}`, decoded.left.problem);
};

import * as E from 'fp-ts/lib/Either.js';
import * as t from 'io-ts';

// The checked values commands are made of. Each failure message says what was expected, and
// reportErrors names the field it came from.

/**
 * A codec that narrows `base` with a check, failing with `message` (also when `base` fails, so a
 * number where a key belongs says what a key must be; a missing value stays "is required").
 */
export const refine = <A>(base: t.Type<A, A, unknown>, name: string, ok: (a: A) => boolean, message: string): t.Type<A, A, unknown> =>
  new t.Type<A, A, unknown>(
    name,
    (u): u is A => base.is(u) && ok(u),
    (u, c) => {
      const decoded = base.validate(u, c);
      if (E.isLeft(decoded)) return u === undefined ? decoded : t.failure<A>(u, c, message);
      return ok(decoded.right) ? decoded : t.failure<A>(u, c, message);
    },
    t.identity,
  );

const isInt = (n: number) => Number.isSafeInteger(n);

export const MAX_NAME_LENGTH = 200;
export const MAX_KEY_LENGTH = 500;
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

export const NonEmptyString = (max: number) =>
  refine(t.string, 'NonEmptyString', (s) => s.trim().length > 0 && s.length <= max, `must be a non-empty string of at most ${max} characters`);

export const Name = NonEmptyString(MAX_NAME_LENGTH);
export const Key = NonEmptyString(MAX_KEY_LENGTH);
export const QueueName = refine(t.string, 'QueueName', (s) => /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$/.test(s), 'must be 1-63 letters, digits, "_", "." or "-"');
export const Limit = refine(t.number, 'Limit', (n) => isInt(n) && n >= 1 && n <= MAX_LIMIT, `must be an integer from 1 to ${MAX_LIMIT}`);
export const LeaseMs = refine(t.number, 'LeaseMs', (n) => isInt(n) && n >= MIN_LEASE_MS && n <= MAX_LEASE_MS, `must be an integer number of milliseconds from ${MIN_LEASE_MS} to ${MAX_LEASE_MS}`);
export const Priority = refine(t.number, 'Priority', (n) => isInt(n) && Math.abs(n) <= 2 ** 31, 'must be an integer (smaller runs first)');
export const MaxAttempts = refine(t.number, 'MaxAttempts', (n) => isInt(n) && n >= 1 && n <= MAX_ATTEMPTS, `must be an integer from 1 to ${MAX_ATTEMPTS}`);
export const Time = refine(t.number, 'Time', (n) => isInt(n) && n >= MIN_TIME && n <= MAX_TIME, 'must be a valid time');
export const Jitter = refine(t.number, 'Jitter', (n) => n >= 0 && n < 1, 'must be a number in [0, 1)');

/** Why `u` is not JSON that survives a round trip unchanged, or undefined when it is. */
const jsonProblem = (u: unknown, path: string, seen: Set<object>): string | undefined => {
  if (u === null || typeof u === 'string' || typeof u === 'boolean') return undefined;
  if (typeof u === 'number') return Number.isFinite(u) ? undefined : `${path} is ${u}, which JSON cannot hold`;
  if (typeof u !== 'object') return `${path} is a ${typeof u}, which JSON cannot hold`;
  if (seen.has(u)) return `${path} refers back to itself (a cycle)`;
  const proto = Object.getPrototypeOf(u);
  if (!Array.isArray(u) && proto !== Object.prototype && proto !== null) {
    return `${path} is a ${proto?.constructor?.name ?? 'non-plain object'}; pass plain objects, arrays, strings, numbers, booleans or null`;
  }
  seen.add(u);
  try {
    if (Array.isArray(u)) {
      for (let i = 0; i < u.length; i++) {
        const p = u[i] === undefined ? `${path}[${i}] is undefined, which JSON cannot hold` : jsonProblem(u[i], `${path}[${i}]`, seen);
        if (p) return p;
      }
      return undefined;
    }
    for (const [k, v] of Object.entries(u)) {
      // An undefined property is the same as an absent one.
      const p = v === undefined ? undefined : jsonProblem(v, `${path}.${k}`, seen);
      if (p) return p;
    }
    return undefined;
  } finally {
    seen.delete(u);
  }
};

/** Job arguments: plain JSON (no functions, BigInts, cycles, class instances), at most MAX_ARGS_BYTES. */
export const JsonArgs = new t.Type<unknown, unknown, unknown>(
  'JsonArgs',
  (u): u is unknown => jsonProblem(u, 'args', new Set()) === undefined,
  (u, c) => {
    const problem = jsonProblem(u, 'args', new Set());
    if (problem) return t.failure(u, c, `must be JSON: ${problem}`);
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

import type { FastifyRequest } from 'fastify';
import * as E from 'fp-ts/lib/Either.js';
import * as t from 'io-ts';
import { budgetOf, type ReadBudget } from '../../commands/read-budget.js';
import { ValidationError, decodeWith } from '../../domain/values.js';
import { operatorName } from './auth.js';

// Request bodies and query strings, checked with io-ts before any route touches the ledger: a
// bad one is a ValidationError naming the field (400), and nothing is written.

/** An object codec that also refuses fields it does not know. */
export interface ClosedObject<A> {
  readonly codec: t.Decoder<unknown, A>;
  readonly fields: readonly string[];
}

/**
 * `required` and `optional` fields, no others. A field it does not know MUST be refused, not
 * dropped: a misspelt `jobId` on release would otherwise release every holder of the key.
 */
export const closedObject = <R extends t.Props, O extends t.Props>(
  required: R,
  optional: O,
): ClosedObject<t.TypeOf<t.TypeC<R>> & Partial<t.TypeOf<t.PartialC<O>>>> => ({
  codec: t.intersection([t.type(required), t.partial(optional)]),
  fields: [...Object.keys(required), ...Object.keys(optional)],
});

/** Checks a parsed body or query against `shape`; `where` names the whole input when it is not an object. */
export const decodeInput = <A>(shape: ClosedObject<A>, input: unknown, where: '(body)' | '(query)'): A => {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) throw new ValidationError(where, 'must be a JSON object');
  const unknown = Object.keys(input).find((field) => !shape.fields.includes(field));
  if (unknown !== undefined) throw new ValidationError(unknown, `is not a known field (known: ${shape.fields.join(', ')})`);
  const decoded = decodeWith(shape.codec, input);
  if (E.isLeft(decoded)) throw decoded.left;
  return decoded.right;
};

/** A query-string integer ("50") as a number. */
export const IntegerString = new t.Type<number, string, unknown>(
  'IntegerString',
  (u): u is number => typeof u === 'number',
  (u, c) => (typeof u === 'string' && /^-?\d{1,15}$/.test(u) ? t.success(Number(u)) : t.failure(u, c, 'must be an integer')),
  String,
);

/** A query-string boolean: "true" or "false", nothing else. */
export const BooleanString = new t.Type<boolean, string, unknown>(
  'BooleanString',
  (u): u is boolean => typeof u === 'boolean',
  (u, c) => (u === 'true' ? t.success(true) : u === 'false' ? t.success(false) : t.failure(u, c, 'must be true or false')),
  String,
);

/**
 * Who the ledger records an operator action under: the name of the named token the request
 * carried; with the shared token, the `by` the body gives, else `http <client address>`. A named
 * operator's `by` MUST NOT name someone else (the audit would show an action by bob that alice
 * took): one that differs is refused, before anything is written, rather than recorded beside
 * the name, so the audit's `by` stays one name a reader can trust.
 */
export const operator = (request: FastifyRequest, by: string | undefined): string => {
  const named = operatorName(request);
  if (named === null) return by ?? `http ${request.ip}`;
  if (by !== undefined && by !== named) throw new ValidationError('by', `is ${JSON.stringify(by)}, but the token is ${named}'s: a named token acts under its own name only (leave by out)`);
  return named;
};

/**
 * How long a GET may read the ledger itself (audit, history, explain) before it is answered 503,
 * by default: serve hosts the sweeper and answers every other request, so no read may hold it for minutes.
 */
export const READ_BUDGET_MS = 5_000;

/** Each request's read budget, `ms` long on the process's monotonic clock. */
export const readBudgets =
  (ms: number) =>
  (): { readonly budget: ReadBudget } => ({ budget: budgetOf(() => performance.now(), ms) });

export type ReadBudgets = ReturnType<typeof readBudgets>;

/** Metadata of every event an HTTP request writes: where the command came from. */
export const VIA = { via: 'http' } as const;

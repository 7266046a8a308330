// SQL fragments the read queries share. Read models store times as timestamptz made from epoch-ms
// values (src/projections/projection.ts `ms`); the queries hand them back as epoch ms.

/** A timestamptz expression as epoch ms (a float8: pg would return a bigint as a string). */
export const epochMs = (expression: string): string => `(extract(epoch FROM ${expression}) * 1000)::float8`;

/** Epoch ms from a float8 column: the read models hold whole milliseconds, so rounding only drops float noise. */
export const toMs = <T extends number | null>(value: T): T => (value === null ? value : Math.round(value)) as T;

import type * as t from 'io-ts';
import { describe, expect, it } from 'vitest';
import { JOB_STATUS_FILTERS } from '../../src/adapters/postgres/queries/job-statuses.js';
import { JobStatusFilter } from '../../src/adapters/postgres/queries/list-jobs.js';
import { runCliInProcess } from './in-process.js';

// Regression (issue 25): `jobledger jobs --status` named one list of statuses in its --help
// (without pending) and another in its error (the ledger's, without failed). Both come from one
// list now, JOB_STATUS_FILTERS (commander's choices), which the ledger's listing validates against
// (JobStatusFilter is built from it). No database: commander answers
// both; a line that reached one would fail at once on NOWHERE (never the embedded PostgreSQL).

/** A DATABASE_URL nothing listens on. */
const NOWHERE = 'postgres://jl@127.0.0.1:1/none';

/** The values a codec of literals, keyofs and unions of them accepts, in its order. */
const valuesOf = (codec: t.Mixed): string[] => {
  const c = codec as t.Mixed & { _tag?: string; types?: t.Mixed[]; keys?: object; value?: string };
  if (c._tag === 'UnionType') return c.types!.flatMap(valuesOf);
  if (c._tag === 'KeyofType') return Object.keys(c.keys!);
  if (c._tag === 'LiteralType') return [c.value!];
  throw new Error(`not a codec of literals: ${codec.name}`);
};

const quoted = (list: string) => list.split(', ').map((s) => s.replace(/^"(.*)"$/, '$1'));

describe('jobs --status', () => {
  it("takes the statuses the ledger's listing validates against, no more, no fewer", () => {
    expect([...JOB_STATUS_FILTERS].sort()).toEqual(valuesOf(JobStatusFilter).sort());
  });

  it('its --help and its error name the same statuses', async () => {
    const help = await runCliInProcess(NOWHERE, ['jobs', '--help']);
    const error = await runCliInProcess(NOWHERE, ['jobs', '--status', 'finished']);
    expect(help.code).toBe(0);
    expect(error.code).toBe(2);
    const inHelp = /\(choices: ([^)]*)\)/.exec(help.stdout.replace(/\s+/g, ' '))?.[1];
    const inError = /Allowed choices are (.*)\.$/.exec(error.stderr.trim())?.[1];
    expect(error.stderr).toMatch(/^error: option '--status <status>' argument 'finished' is invalid\. Allowed choices are .*\.\n$/);
    expect(quoted(inHelp!)).toEqual([...JOB_STATUS_FILTERS]);
    expect(quoted(inError!)).toEqual([...JOB_STATUS_FILTERS]);
  });
});

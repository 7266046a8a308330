import type { DomainError } from '../../../domain/errors.js';
import type { Ledger } from '../../ledger.js';
import { UsageError } from '../errors.js';

// What an operator action (cancel, retry, release, discard, pause, resume, set-limit) says when
// the state of its job or key leaves it nothing to do: exit 2, as a refusal of the decider exits,
// and one line on stderr naming the job or key, where it stands and why nothing was done. Issue
// 25: cancel of a finished job exited 0 where retry of a job not dead exited 2, so a script could
// not tell an action done from one that did nothing. Not a command (program.ts lists those).
// What it reads to say so (the job's standing, the key's holders) is read once nothing was done.

/** Ends the command with exit 2: nothing was done to `what` (a job or a key and where it stands), and `why`. */
export const unchanged = (what: string, why: string): never => {
  throw new UsageError(`${what}: ${why}; nothing changed`);
};

/** The decider's refusal the action ended with, if that is how it ended (RefusedError); the domain is loaded by then. */
export const refusalOf = async (error: unknown): Promise<DomainError | undefined> => {
  const { RefusedError } = await import('../../../domain/errors.js');
  return error instanceof RefusedError ? error.error : undefined;
};

/**
 * Where a job stands now, as a line names it: "cancelled (by erin)", "parked", "completed"; with
 * its key when that is not `onKey`, the key the action named ("holding on key b").
 */
export const standingOf = async (ledger: Ledger, jobId: string, onKey?: string): Promise<string> => {
  const x = await ledger.explain({ jobId });
  const where = onKey !== undefined && x.key !== onKey && x.status !== 'unknown' ? ` on key ${x.key}` : '';
  return `${x.status}${where}${x.ended?.by ? ` (by ${x.ended.by})` : ''}`;
};

/** Jobs a line names with their standing before the rest are counted: each is a read. */
const NAMED = 3;

/** "job a is holding", "jobs a (holding), b (completed) and 3 more are": what a refusal naming several jobs says of where they stand. */
export const jobsStanding = async (ledger: Ledger, jobIds: readonly string[], onKey?: string): Promise<string> => {
  const named = await Promise.all(jobIds.slice(0, NAMED).map(async (id) => [id, await standingOf(ledger, id, onKey)] as const));
  if (jobIds.length === 1) return `job ${named[0]![0]} is ${named[0]![1]}`;
  const more = jobIds.length - named.length;
  return `jobs ${named.map(([id, standing]) => `${id} (${standing})`).join(', ')}${more > 0 ? ` and ${more} more` : ''} are`;
};

/** How a holder's slot passes on once its lease is revoked: said alike by release and cancel. */
export const PASSES_ON = 'its handler is told to stop, and its slot passes on when it has (or when its lease lapses)';

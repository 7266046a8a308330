import type { Command } from 'commander';
import { auditKeyOf, jobName } from '../../../domain/audit.js';
import type { JobEntry } from '../../../domain/key-state.js';
import { withLedgerToRead, type CommandContext } from '../context.js';
import { UsageError } from '../errors.js';
import { print, table, time } from '../output.js';
import { integer, isoTime } from '../parse.js';

/**
 * Where a job is from and what else it is under: a guest (a job of another key under this key's
 * limit) names its key, null for the key's own; `limits` lists every further limit key of the job.
 */
const placeOf = (j: JobEntry) => ({ home: j.home === undefined ? null : auditKeyOf(j.home), limits: j.limits ?? [] });

type Placed = ReturnType<typeof placeOf> & { readonly jobId: string };

const who = (j: Placed): string => jobName(j.jobId, j.home);

export const registerState = (program: Command, ctx: CommandContext): void => {
  program
    .command('state')
    .description("a key's state folded from its stream: now, at a past moment (--at) or after a revision (--revision)")
    .requiredOption('--key <key>', 'concurrency key (refused when no job was ever enqueued with it)')
    .option('--at <iso>', 'as it was at this time (default: now)', isoTime('--at'))
    .option('--revision <n>', 'as it was after this stream revision (default: the last)', integer('--revision'))
    .option('--json', 'machine-readable output')
    .action(async (flags: { key: string; at?: Date; revision?: number; json?: boolean }) => {
      const [{ holders, jobsIn, parkedInOrder }, { Key, checkField }] = await Promise.all([import('../../../domain/key-state.js'), import('../../../domain/values.js')]);
      checkField('--key', Key, flags.key);
      if (flags.at && flags.revision !== undefined) throw new UsageError('--revision: give --at or --revision, not both');
      if (flags.revision !== undefined && flags.revision < 0) throw new UsageError('--revision: must be 0 or more');
      const until = { ...(flags.at ? { at: flags.at.getTime() } : {}), ...(flags.revision !== undefined ? { revision: flags.revision } : {}) };
      const found = await withLedgerToRead(ctx, (ledger) => ledger.keyStateAt(flags.key, until));
      if ('firstEventAt' in found) {
        print({ json: flags.json === true }, { key: flags.key, revision: null, at: null, firstEventAt: time(found.firstEventAt) }, () =>
          `key ${JSON.stringify(flags.key)} had no event yet at ${time(until.at)}: its first was at ${time(found.firstEventAt)}`,
        );
        return;
      }
      const { state, revision, at } = found;
      const view = {
        key: flags.key,
        revision,
        at: time(at),
        limit: state.limit,
        leaseMs: state.leaseMs,
        paused: state.paused === undefined ? null : { by: state.paused.by, reason: state.paused.reason, at: time(state.paused.at) },
        // A guest's worker, expiry and attempts are kept at its home: null here, not 0.
        holders: holders(state).map((j) => ({ jobId: j.jobId, ...placeOf(j), leaseId: j.lease?.leaseId, since: time(j.lease?.acquiredAt), expiresAt: time(j.lease?.expiresAt), workerId: j.lease?.workerId, attempts: j.home === undefined ? j.attempts : null })),
        parked: parkedInOrder(state).map((j) => ({ jobId: j.jobId, ...placeOf(j), priority: j.priority, parkedAt: time(j.parkedAt) })),
        scheduled: jobsIn(state, 'scheduled').map((j) => ({ jobId: j.jobId, ...placeOf(j), priority: j.priority, runAt: time(j.runAt), attempts: j.attempts })),
      };
      const guests = { holding: view.holders.filter((h) => h.home !== null).length, parked: view.parked.filter((p) => p.home !== null).length };
      // The other limits of each job (a guest's list names this key too); the column only when some job has any.
      const also = (j: Placed) => j.limits.filter((k) => k !== flags.key).join(', ');
      const withLimits = [...view.holders, ...view.parked, ...view.scheduled].some((j) => also(j) !== '');
      const limitsColumn = (j: Placed) => (withLimits ? [also(j)] : []);
      const limitsHead = withLimits ? ['also under'] : [];
      print({ json: flags.json === true }, view, () =>
        [
          `key ${JSON.stringify(flags.key)} at revision ${revision}${at ? ` (${time(at)})` : ''}: limit ${state.limit}, ${view.holders.length} holding, ${view.parked.length} parked, ${view.scheduled.length} scheduled`,
          guests.holding + guests.parked > 0 ? `of them ${guests.holding} holding and ${guests.parked} parked are jobs of other keys under this key's limit (their workers and attempts are in their own keys' state)` : '',
          view.paused ? `paused by ${view.paused.by} at ${view.paused.at}${view.paused.reason === null ? '' : `: ${view.paused.reason}`} (nothing new is admitted)` : '',
          view.holders.length ? table(['holder', 'lease', 'since', 'expires', 'worker', 'attempts', ...limitsHead], view.holders.map((h) => [who(h), h.leaseId, h.since, h.expiresAt, h.workerId, h.attempts, ...limitsColumn(h)])) : '',
          view.parked.length ? table(['parked (promotion order)', 'priority', 'parked at', ...limitsHead], view.parked.map((p) => [who(p), p.priority, p.parkedAt, ...limitsColumn(p)])) : '',
          view.scheduled.length ? table(['scheduled', 'priority', 'run at', 'attempts', ...limitsHead], view.scheduled.map((s) => [who(s), s.priority, s.runAt, s.attempts, ...limitsColumn(s)])) : '',
        ]
          .filter(Boolean)
          .join('\n'),
      );
    });
};

import type { Command } from 'commander';
import { keyStateAt } from '../../../commands/key-state-at.js';
import { holders, jobsIn, parkedInOrder } from '../../../domain/key-state.js';
import { keyStream } from '../../../domain/streams.js';
import { Key } from '../../../domain/values.js';
import { withLedger, type CommandContext } from '../context.js';
import { UsageError } from '../errors.js';
import { print, table, time } from '../output.js';
import { checked, integer, isoTime } from '../parse.js';

export const registerState = (program: Command, ctx: CommandContext): void => {
  program
    .command('state')
    .description("a key's state folded from its stream: now, at a past moment (--at) or after a revision (--revision)")
    .requiredOption('--key <key>', 'concurrency key', checked('--key', Key))
    .option('--at <iso>', 'as it was at this time', isoTime('--at'))
    .option('--revision <n>', 'as it was after this stream revision', integer('--revision'))
    .option('--json', 'machine-readable output')
    .action(async (flags: { key: string; at?: Date; revision?: number; json?: boolean }) => {
      if (flags.at && flags.revision !== undefined) throw new UsageError('--revision: give --at or --revision, not both');
      if (flags.revision !== undefined && flags.revision < 0) throw new UsageError('--revision: must be 0 or more');
      const { state, revision, at } = await withLedger(ctx, (ledger) =>
        keyStateAt(ledger.store, keyStream(flags.key), {
          ...(flags.at ? { at: flags.at.getTime() } : {}),
          ...(flags.revision !== undefined ? { revision: flags.revision } : {}),
        }),
      );
      const view = {
        key: flags.key,
        revision,
        at: time(at),
        limit: state.limit,
        leaseMs: state.leaseMs,
        paused: state.paused === undefined ? null : { by: state.paused.by, reason: state.paused.reason, at: time(state.paused.at) },
        holders: holders(state).map((j) => ({ jobId: j.jobId, leaseId: j.lease?.leaseId, since: time(j.lease?.acquiredAt), expiresAt: time(j.lease?.expiresAt), workerId: j.lease?.workerId, attempts: j.attempts })),
        parked: parkedInOrder(state).map((j) => ({ jobId: j.jobId, priority: j.priority, parkedAt: time(j.parkedAt) })),
        scheduled: jobsIn(state, 'scheduled').map((j) => ({ jobId: j.jobId, priority: j.priority, runAt: time(j.runAt), attempts: j.attempts })),
      };
      print({ json: flags.json === true }, view, () =>
        [
          `key ${JSON.stringify(flags.key)} at revision ${revision}${at ? ` (${time(at)})` : ''}: limit ${state.limit}, ${view.holders.length} holding, ${view.parked.length} parked, ${view.scheduled.length} scheduled`,
          view.paused ? `paused by ${view.paused.by} at ${view.paused.at}${view.paused.reason === null ? '' : `: ${view.paused.reason}`} (nothing new is admitted)` : '',
          view.holders.length ? table(['holder', 'lease', 'since', 'expires', 'worker', 'attempts'], view.holders.map((h) => [h.jobId, h.leaseId, h.since, h.expiresAt, h.workerId, h.attempts])) : '',
          view.parked.length ? table(['parked (promotion order)', 'priority', 'parked at'], view.parked.map((p) => [p.jobId, p.priority, p.parkedAt])) : '',
          view.scheduled.length ? table(['scheduled', 'priority', 'run at', 'attempts'], view.scheduled.map((s) => [s.jobId, s.priority, s.runAt, s.attempts])) : '',
        ]
          .filter(Boolean)
          .join('\n'),
      );
    });
};

import type { Command } from 'commander';
import ms from 'ms';
import { withReader, type CommandContext } from '../context.js';
import { print, table, time } from '../output.js';

export const registerWorkers = (program: Command, ctx: CommandContext): void => {
  program
    .command('workers')
    .description('the workers that announced themselves (id, queue, host, pid, concurrency, jobs running, slots held, last heartbeat): live ones, or with --all also the gone (stopped, or silent for 3 heartbeats; kept for a day)')
    .option('--all', 'also the gone workers')
    .option('--json', 'machine-readable output')
    .action(async (flags: { all?: boolean; json?: boolean }) => {
      // The reader is imported when it runs (withReader): --help must not load the driver. It does
      // not migrate: a look at who runs leaves the schema to the processes that run.
      const workers = await withReader(ctx, (reader) => reader.workers(), { migrate: false });
      const shown = flags.all === true ? workers : workers.filter((w) => w.state === 'live');
      const hidden = workers.length - shown.length;
      print({ json: flags.json === true }, shown, () =>
        shown.length === 0
          ? 'no live workers'
          : table(
              ['worker', 'queue', 'state', 'host', 'pid', 'concurrency', 'running', 'holding', 'last seen', 'started', 'stopped'],
              shown.map((w) => [w.id, w.queue, w.state, w.host, w.pid, w.concurrency, w.running, w.holding, `${ms(w.seenAgoMs)} ago`, time(w.startedAt), time(w.stoppedAt)]),
            ),
      );
      if (hidden > 0) ctx.note(`${hidden} gone worker${hidden === 1 ? '' : 's'} not shown (--all shows them)`);
    });
};

import type { Command } from 'commander';
import type { Projection } from '../../../projections/projection.js';
import type { RowDifference } from '../../../projections/verify.js';
import { withReader, type CommandContext } from '../context.js';
import { UsageError } from '../errors.js';
import { print, table } from '../output.js';

// `jobledger replay`: rebuilds read models from the ledger (src/projections/rebuild.ts), or with
// --verify replays it beside them and reports where they differ (src/projections/verify.ts).
// Through the ledger's read side (LedgerReader); it, the projections and the progress bar are
// imported when it runs, not when it registers.

interface Replayed {
  readonly projection: string;
  readonly verified: boolean;
  readonly events: number;
  readonly ms: number;
  /** Rows in each table afterwards (verify: the live tables). */
  readonly rows: Readonly<Record<string, number>>;
  /** --verify only. */
  readonly differences?: readonly RowDifference[];
}

/** The projections named by --projection (default: every rebuildable one); a UsageError before anything is opened. */
const chosen = async (name: string | undefined): Promise<Projection[]> => {
  const [{ ledgerProjections }, { NotRebuildableError, rebuildSpec }] = await Promise.all([
    import('../../../projections/ledger-projections.js'),
    import('../../../projections/rebuild.js'),
  ]);
  const known = ledgerProjections().map((p) => p.projection);
  const rebuildable = known.filter((p) => p.rebuild !== undefined);
  if (name === undefined) return rebuildable;
  const projection = known.find((p) => p.name === name);
  const names = rebuildable.map((p) => p.name).join(', ');
  if (projection === undefined) throw new UsageError(`--projection: unknown projection "${name}" (rebuildable: ${names})`);
  try {
    rebuildSpec(projection);
  } catch (error) {
    if (error instanceof NotRebuildableError) throw new UsageError(`--projection: ${error.message} (its effects are notifications); rebuildable: ${names}`);
    throw error;
  }
  return [projection];
};

const value = (v: unknown) => JSON.stringify(v) ?? 'null';

const describe = (d: RowDifference): string =>
  d.kind === 'missing'
    ? 'missing: the ledger gives this row, the table lacks it'
    : d.kind === 'extra'
      ? 'extra: the table has this row, the ledger does not give it'
      : `changed: ${d.columns.map((c) => `${c.column} ${value(c.live)} (ledger: ${value(c.ledger)})`).join(', ')}`;

const human = (r: Replayed): string => {
  const seconds = (r.ms / 1000).toFixed(2);
  const rate = Math.round(r.events / Math.max(r.ms / 1000, 0.001));
  const rows = Object.entries(r.rows).map(([t, n]) => `${t} ${n}`).join(', ');
  if (!r.verified) return `${r.projection}: rebuilt from ${r.events} events in ${seconds} s (${rate} events/s); rows: ${rows}`;
  const differences = r.differences ?? [];
  const head = `${r.projection}: replayed ${r.events} events beside the live tables in ${seconds} s (${rate} events/s); live rows: ${rows}`;
  if (differences.length === 0) return `${head}\nno differences: the read models are what the ledger gives`;
  const rowsTable = table(
    ['table', 'row', 'difference'],
    differences.map((d) => [d.table, Object.entries(d.key).map(([k, v]) => `${k}=${String(v)}`).join(' '), describe(d)]),
  );
  return `${head}\n${differences.length} ${differences.length === 1 ? 'row differs' : 'rows differ'}:\n${rowsTable}`;
};

export const registerReplay = (program: Command, ctx: CommandContext): void => {
  program
    .command('replay')
    .description(
      'rebuild read models from the ledger (one transaction: readers see the old rows until it commits), with a progress bar on a terminal; ' +
        '--verify replays beside the live tables instead, changes nothing, and exits 1 if any row differs',
    )
    .option('--projection <name>', 'only this projection (default: every rebuildable one: read_models)')
    .option('--verify', 'compare instead of rebuilding: report every row that differs, by table and primary key')
    .option('--json', 'machine-readable output')
    .action(async (flags: { projection?: string; verify?: boolean; json?: boolean }) => {
      const projections = await chosen(flags.projection);
      const verifying = flags.verify === true;
      const [{ EventDecodeError }, { progress }] = await Promise.all([import('../../../domain/recorded.js'), import('../progress.js')]);
      const results = await withReader(
        ctx,
        async (reader) => {
          const total = await reader.eventCount();
          const out: Replayed[] = [];
          for (const projection of projections) {
            const bar = progress({ label: `${verifying ? 'verifying' : 'replaying'} ${projection.name}`, unit: 'events', total });
            const onProgress = ({ events }: { events: number }) => bar.update(events, Math.max(total, events));
            const started = Date.now();
            try {
              if (verifying) {
                const v = await reader.verify(projection, { onProgress });
                out.push({ projection: projection.name, verified: true, events: v.events, ms: Date.now() - started, rows: v.rows, differences: v.differences });
              } else {
                const { events, rows } = await reader.rebuild(projection, { onProgress });
                out.push({ projection: projection.name, verified: false, events, ms: Date.now() - started, rows });
              }
            } catch (error) {
              // A rebuild is one transaction: it stops at an undecodable event and leaves the read models as they were.
              if (error instanceof EventDecodeError) throw new Error(`${projection.name}: ${error.message}; nothing was ${verifying ? 'compared' : 'rebuilt'} (fix the event, or use a release that reads it)`, { cause: error });
              throw error;
            } finally {
              bar.stop();
            }
          }
          return out;
        },
        { poolSize: 2 },
      );
      print({ json: flags.json === true }, { projections: results }, () => results.map(human).join('\n'));
      const differing = results.filter((r) => (r.differences?.length ?? 0) > 0);
      if (differing.length > 0) {
        throw new Error(`${differing.map((r) => `${r.projection}: ${r.differences!.length} ${r.differences!.length === 1 ? "row differs" : "rows differ"} from the ledger`).join('; ')} (jobledger replay rebuilds them)`);
      }
    });
};

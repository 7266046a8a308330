import type { Command } from 'commander';
import { resolveToken, isLoopback } from '../../http/auth.js';
import { createHttpServer } from '../../http/server.js';
import { createLedger, createPool } from '../../ledger.js';
import type { CommandContext } from '../context.js';
import { openDatabase } from '../database.js';
import { UsageError, asUsage } from '../errors.js';
import { each, integer, queueCap, queueCaps } from '../parse.js';

interface ServeFlags {
  port: number;
  host: string;
  asyncProjections?: boolean;
  queueCap?: (readonly [string, number])[];
}

/** Resolves at the first SIGTERM/SIGINT; a second one exits at once. */
const untilSignalled = (ctx: CommandContext): Promise<void> =>
  new Promise((resolve) => {
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      signals += 1;
      if (signals > 1) process.exit(130);
      ctx.note(`${signal}: stopping`);
      resolve();
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });

export const registerServe = (program: Command, ctx: CommandContext): void => {
  program
    .command('serve')
    .description(
      'run the background parts (sweeper; async projection runners with --async-projections) and the HTTP dashboard, JSON API and /metrics until SIGTERM/SIGINT.\n' +
        'Mutating routes need Authorization: Bearer $JOBLEDGER_TOKEN (when unset, a token is generated and printed once to stderr).',
    )
    .option('--port <port>', 'TCP port (0: any free port)', integer('--port'), 7070)
    .option('--host <address>', 'address to bind; anything but loopback needs JOBLEDGER_TOKEN set', '127.0.0.1')
    .option('--queue-cap <queue=n>', 'a queue capped at n running jobs across every process (repeatable; default: JOBLEDGER_QUEUES, e.g. "builds=3,emails=10"); recorded as the limit of the key queue:<queue>', each(queueCap('--queue-cap')))
    .option('--async-projections', 'apply the read models and dispatch from a subscription here, not in each append (writers must open the ledger with inline projections off)')
    .action(async (flags: ServeFlags) => {
      if (flags.port < 0 || flags.port > 65_535) throw new UsageError(`--port: ${flags.port} is not a TCP port (0-65535)`);
      const { token, generated } = resolveToken(process.env);
      // A generated token is printed on this machine's stderr only; anyone who can reach a
      // non-loopback address MUST NOT be the first to act on a dashboard whose token nobody chose.
      if (generated && !isLoopback(flags.host)) {
        throw new UsageError(`--host: ${flags.host} is not a loopback address; set JOBLEDGER_TOKEN to serve on it`);
      }
      const db = await openDatabase((line) => ctx.logger.debug({ embedded: line }));
      const pool = createPool({ databaseUrl: db.url, poolSize: 6, logger: ctx.logger });
      try {
        // Without the flag, the database's own mode (ledger_settings): serve runs whichever runners it needs.
        const queues = queueCaps(flags.queueCap);
        const ledger = await createLedger({
          pool,
          logger: ctx.logger,
          waitForDatabaseMs: Number.POSITIVE_INFINITY,
          ...(flags.asyncProjections === true ? { inlineProjections: false } : {}),
          ...(queues === undefined ? {} : { queues }),
        }).catch(asUsage({ queues: '--queue-cap' }));
        try {
          ledger.start();
          const server = await createHttpServer({ ledger, db: pool, token, loopbackOnly: isLoopback(flags.host), logger: ctx.logger.child({ component: 'http' }) });
          try {
            const signalled = untilSignalled(ctx);
            const url = await server.listen({ port: flags.port, host: flags.host });
            if (generated) ctx.note(`JOBLEDGER_TOKEN is unset; the token for this run (mutating routes and the page's actions need it): ${token}`);
            ctx.note(`jobledger serving ${url}/ (${db.describe}; projections ${ledger.projectionMode})`);
            await signalled;
          } finally {
            await server.close();
          }
        } finally {
          await ledger.close();
        }
      } finally {
        await pool.end();
        await db.close();
      }
    });
};

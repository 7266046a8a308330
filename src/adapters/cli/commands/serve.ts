import type { Command } from 'commander';
import type { CommandContext } from '../context.js';
import { UsageError, asUsage } from '../errors.js';
import { each, hostName, integer, queueCap, queueCaps } from '../parse.js';

interface ServeFlags {
  port: number;
  host: string;
  publicReads?: boolean;
  allowedHost?: string[];
  asyncProjections?: boolean;
  queueCap?: (readonly [string, number])[];
}

/** Resolves at the first SIGTERM/SIGINT; a second one exits at once. */
/**
 * How long serve's answer to a page of keys, or to a key, answers the same question again without
 * a read: the page polls every 2 s, so ten pages on a moving ledger read once a second, not five
 * times (HttpServerOptions.answersFreshMs).
 */
const SERVE_ANSWERS_FRESH_MS = 1_000;

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
        'Mutating routes need Authorization: Bearer <token>, from the environment:\n' +
        '  JOBLEDGER_TOKENS=alice:<token>,bob:<token>  named tokens: each action is recorded under its operator\'s name (a body\'s "by" naming anyone else is refused)\n' +
        '  JOBLEDGER_TOKENS_FILE=<path>                 the same, one name:token a line ("#" starts a comment); instead of JOBLEDGER_TOKENS\n' +
        '  JOBLEDGER_TOKEN=<token>                      one shared token, beside the named ones or alone: its actions are recorded under the body\'s "by", else "http <client address>"\n' +
        'With none set, a token is generated and printed once to stderr (loopback only).\n' +
        'Bound off loopback, reads (the JSON API, /metrics) need a token too, unless --public-reads; the page itself asks for it.\n' +
        'A request is served only under a Host naming this server: a loopback name, the --host address (any of the machine\'s for 0.0.0.0 or ::), or an --allowed-host.',
    )
    .option('--port <port>', 'TCP port (0: any free port)', integer('--port'), 7070)
    .option('--host <address>', 'address to bind; anything but loopback needs a token set (JOBLEDGER_TOKEN, JOBLEDGER_TOKENS or JOBLEDGER_TOKENS_FILE)', hostName('--host'), '127.0.0.1')
    .option('--public-reads', 'off loopback, serve reads (the JSON API, /metrics) without a token; writes still need one')
    .option('--allowed-host <name>', 'a further name a request\'s Host may give, e.g. a proxy\'s or the machine\'s DNS name (repeatable)', each(hostName('--allowed-host')))
    .option('--queue-cap <queue=n>', 'a queue capped at n running jobs across every process (repeatable; default: JOBLEDGER_QUEUES, e.g. "builds=3,emails=10"); recorded as the limit of the key queue:<queue>', each(queueCap('--queue-cap')))
    .option('--async-projections', 'apply the read models and dispatch from a subscription here, not in each append (writers must open the ledger with inline projections off)')
    .action(async (flags: ServeFlags) => {
      if (flags.port < 0 || flags.port > 65_535) throw new UsageError(`--port: ${flags.port} is not a TCP port (0-65535)`);
      // Imported here, not at registration: `jobledger --help` must not load fastify, the ledger or io-ts.
      const [{ isLoopback, resolveTokens }, { createHttpServer }, { createLedger }, { openDatabase }] = await Promise.all([
        import('../../http/auth.js'),
        import('../../http/server.js'),
        import('../../ledger.js'),
        import('../database.js'),
      ]);
      // Checked before the database is opened: a bad token setting fails at once, naming the variable.
      const { tokens, generated } = resolveTokens(process.env);
      // A generated token is printed on this machine's stderr only; anyone who can reach a
      // non-loopback address MUST NOT be the first to act on a dashboard whose token nobody chose.
      // Nor read one (issue 21): off loopback, reads need the token too, unless --public-reads.
      if (generated && !isLoopback(flags.host)) {
        throw new UsageError(
          `--host: ${flags.host} is not a loopback address; set JOBLEDGER_TOKEN (or JOBLEDGER_TOKENS / JOBLEDGER_TOKENS_FILE) to serve on it: ` +
            'every request but the page\'s own files then needs it, reads too, unless you also pass --public-reads',
        );
      }
      const db = await openDatabase((line) => ctx.logger.debug({ embedded: line }));
      try {
        // Without the flag, the database's own mode (ledger_settings): serve runs whichever runners it needs.
        const queues = queueCaps(flags.queueCap);
        // One pool, the ledger's, for its writer, sweeper and runners and the HTTP server's reads.
        const ledger = await createLedger({
          databaseUrl: db.url,
          poolSize: 6,
          logger: ctx.logger,
          waitForDatabaseMs: Number.POSITIVE_INFINITY,
          ...(flags.asyncProjections === true ? { inlineProjections: false } : {}),
          ...(queues === undefined ? {} : { queues }),
        }).catch(asUsage({ queues: '--queue-cap' }));
        try {
          const server = await createHttpServer({
            ledger,
            tokens,
            host: flags.host,
            publicReads: flags.publicReads === true,
            allowedHosts: flags.allowedHost ?? [],
            answersFreshMs: SERVE_ANSWERS_FRESH_MS,
            logger: ctx.logger.child({ component: 'http' }),
          });
          try {
            const signalled = untilSignalled(ctx);
            const url = await server.listen({ port: flags.port, host: flags.host });
            // Once listening: a server that cannot bind its address stops before the sweeper writes anything.
            ledger.start();
            if (generated) ctx.note(`JOBLEDGER_TOKEN is unset; the token for this run (mutating routes and the page's actions need it): ${tokens[0]!.token}`);
            else {
              const names = tokens.flatMap((t) => (t.name === null ? [] : [t.name]));
              if (names.length > 0) ctx.note(`named tokens for ${[...new Set(names)].join(', ')}${tokens.some((t) => t.name === null) ? ', and the shared JOBLEDGER_TOKEN' : ''}`);
            }
            ctx.note(`jobledger serving ${url}/ (${db.describe}; projections ${ledger.projectionMode})`);
            await signalled;
          } finally {
            await server.close();
          }
        } finally {
          await ledger.close();
        }
      } finally {
        await db.close();
      }
    });
};

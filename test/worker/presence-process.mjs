// A worker in an OS process of its own, for test/worker/presence.int.test.ts: killed with
// SIGKILL, it writes nothing more, as a worker that crashed. Plain ESM on the built library
// (npm test builds dist/ first), no TypeScript loader.
//
// argv[2]: JSON { databaseUrl, queue, presenceIntervalMs }. Prints {"workerId":...} once started;
// its one handler, "hang", runs until the process dies.

import { createLedger } from '../../dist/src/index.js';

const { databaseUrl, queue, presenceIntervalMs } = JSON.parse(process.argv[2]);
const ledger = await createLedger({ databaseUrl, poolSize: 3, migrate: false });
const worker = ledger.worker({ queue, presenceIntervalMs, concurrency: 2, handlers: { hang: () => new Promise(() => {}) } });
worker.start();
process.stdout.write(`${JSON.stringify({ workerId: worker.workerId })}\n`);

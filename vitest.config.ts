import { defineConfig } from 'vitest/config';

// unit: pure, no I/O. int/e2e: real PostgreSQL (see test/support/global-setup.ts for how one is found).
// Two workers: unit and int files run two at a time (each int file has a database of its own),
// which vitest's default here (one) left idle while tests waited on PostgreSQL. e2e files run one
// at a time: they time worker processes and handlers, and a neighbour's load would skew that.
export default defineConfig({
  test: {
    maxWorkers: 2,
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/**/*.unit.test.ts'],
        },
      },
      {
        test: {
          name: 'int',
          include: ['test/**/*.int.test.ts'],
          globalSetup: ['test/support/global-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
      // The ledger distributed on a Citus cluster (JOBLEDGER_CITUS_URL: test/support/citus.ts): a
      // project only where a cluster is given (`npm run test:citus`; .ci/run builds and starts one).
      ...(process.env.JOBLEDGER_CITUS_URL
        ? [
            {
              test: {
                name: 'citus',
                include: ['test/**/*.citus.test.ts'],
                fileParallelism: false,
                testTimeout: 300_000,
                hookTimeout: 300_000,
              },
            },
          ]
        : []),
      {
        test: {
          name: 'e2e',
          include: ['test/**/*.e2e.test.ts'],
          fileParallelism: false,
          globalSetup: ['test/support/global-setup.ts'],
          testTimeout: 180_000,
          hookTimeout: 300_000,
        },
      },
    ],
  },
});

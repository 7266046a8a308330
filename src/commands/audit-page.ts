// The size of a key's audit page, apart from the audit itself: the CLI's help names it without
// loading what the audit needs (io-ts; test/cli/start.e2e.test.ts keeps help light).

/** Events of a key's audit page when the caller names no limit, and the most a page takes. */
export const AUDIT_PAGE = 1_000;
export const MAX_AUDIT_PAGE = 10_000;

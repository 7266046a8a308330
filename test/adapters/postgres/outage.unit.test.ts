import { describe, expect, it } from 'vitest';
import { DatabaseOutages, isConnectionError, waitingForDatabase } from '../../../src/adapters/postgres/outage.js';
import { TransientWriteError } from '../../../src/domain/ports/ledger-store.js';

const lines: { level: string; message: string | undefined }[] = [];
const log = {
  child: () => log,
  error: () => undefined,
  warn: (_: unknown, message?: string) => void lines.push({ level: 'warn', message }),
  info: (_: unknown, message?: string) => void lines.push({ level: 'info', message }),
  debug: () => undefined,
  trace: () => undefined,
};

const refused = () => Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED', syscall: 'connect' });
const shutdown = () => Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01', severity: 'FATAL' });

describe('isConnectionError', () => {
  it('knows a restart, a refused connection and a cut socket, also wrapped by the writer', () => {
    expect(isConnectionError(shutdown())).toBe(true);
    expect(isConnectionError(refused())).toBe(true);
    expect(isConnectionError(new Error('Connection terminated unexpectedly'))).toBe(true);
    expect(isConnectionError(new TransientWriteError('retry', { cause: shutdown() }))).toBe(true);
  });

  it('does not take a refused statement for an outage', () => {
    expect(isConnectionError(Object.assign(new Error('duplicate key'), { code: '23505', severity: 'ERROR' }))).toBe(false);
    expect(isConnectionError(new TransientWriteError('deadlock detected'))).toBe(false);
    expect(isConnectionError('ECONNREFUSED')).toBe(false);
  });
});

describe('DatabaseOutages (regression: a line per failed statement during an outage)', () => {
  it('one warning when an outage begins, one line when it ends, however many parts fail meanwhile', () => {
    lines.length = 0;
    let now = 1_000;
    const outages = new DatabaseOutages(log, () => now);
    expect(outages.failed(new Error('syntax error'))).toBe(false);
    for (let i = 0; i < 20; i++) expect(outages.failed(i % 2 ? shutdown() : refused())).toBe(true);
    now += 2_500;
    outages.answered();
    outages.answered();
    expect(lines).toEqual([
      { level: 'warn', message: 'PostgreSQL unreachable; every part keeps retrying until it answers' },
      { level: 'info', message: 'PostgreSQL answers again after 2.5 s' },
    ]);
  });

  it('an operation that began before the outage ended and fails after it opens no new outage; one that began after does', () => {
    lines.length = 0;
    const outages = new DatabaseOutages(log);
    const before = outages.generation;
    outages.failed(shutdown());
    outages.answered();
    expect(outages.failed(new Error('Connection terminated unexpectedly'), before)).toBe(true);
    expect(outages.down).toBe(false);
    expect(outages.failed(refused(), outages.generation)).toBe(true);
    expect(outages.down).toBe(true);
    expect(lines.map((l) => l.level)).toEqual(['warn', 'info', 'warn']);
  });
});

describe('waitingForDatabase', () => {
  it('waits out connection errors and returns once the database answers', async () => {
    let calls = 0;
    const outages = new DatabaseOutages(log);
    const result = await waitingForDatabase(
      async () => {
        if (++calls < 3) throw refused();
        return 'open';
      },
      { outages, timeoutMs: 10_000, random: () => 0, clock: Date.now },
    );
    expect({ result, calls, down: outages.down }).toEqual({ result: 'open', calls: 3, down: false });
  });

  it('throws any other error at once, and a connection error once the wait is over', async () => {
    const outages = new DatabaseOutages(log);
    await expect(waitingForDatabase(() => Promise.reject(new Error('password authentication failed')), { outages, timeoutMs: 10_000, random: () => 0, clock: Date.now })).rejects.toThrow('password');
    await expect(waitingForDatabase(() => Promise.reject(refused()), { outages, timeoutMs: 0, random: () => 0, clock: Date.now })).rejects.toThrow('ECONNREFUSED');
  });
});

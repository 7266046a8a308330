import pg from 'pg';

// Leader election by a session advisory lock on a dedicated connection, for the processes of
// which one at a time may act: the sweeper, and each async projection runner. The server frees a
// session lock when its session ends, so a leader that crashes or loses its connection loses the
// lock with it and a successor can take over; no lease to renew, no clock to trust.
//
//   connected --tryLead(): true--> leading --connection error or end--> lost (for good)
//       |  tryLead(): false: still connected, may try again            ^
//       +-------------------------- release() ends the session from any state
//
// A lost leader is never reused: the caller connects a new one. The lock may be someone else's
// before `lost` settles here (the server ends the session first), so a write that only the leader
// may make MUST check the server's view in its own transaction: the async runner's checkpoint
// write checks that `pid` still holds the lock. The sweeper's need not: its commands go through
// the decider with expected revisions, so a second sweeper for a moment only repeats the work.

/** The lock: an SQL expression of its bigint key, and the values of its parameters. */
export interface AdvisoryLock {
  readonly key: string;
  readonly values: readonly unknown[];
}

/** The leader's lock connection was lost, or (async runner) another runner moved the checkpoint: it stops acting. */
export class LeadershipLostError extends Error {
  override readonly name = 'LeadershipLostError';
}

export class AdvisoryLeader {
  /** Rejects when the connection fails (with its error) or ends (LeadershipLostError); never resolves. */
  readonly lost: Promise<never>;
  private backendPid: number | undefined;
  private ended = false;

  private constructor(
    private readonly client: pg.Client,
    private readonly lock: AdvisoryLock,
  ) {
    let lose!: (error: Error) => void;
    this.lost = new Promise<never>((_, reject) => (lose = reject));
    // Awaited only by those racing it; a loss nobody waits for must not go unhandled.
    this.lost.catch(() => undefined);
    // Without an 'error' listener a lost connection would end the process.
    client.on('error', (error) => {
      this.ended = true;
      lose(error);
    });
    client.on('end', () => {
      this.ended = true;
      lose(new LeadershipLostError('lock connection ended'));
    });
  }

  /** A dedicated connection (never the pool's: the lock is the session's), not leading yet. */
  static async connect(config: pg.ClientConfig, lock: AdvisoryLock): Promise<AdvisoryLeader> {
    const leader = new AdvisoryLeader(new pg.Client(config), lock);
    try {
      await leader.client.connect();
    } catch (error) {
      await leader.release();
      throw error;
    }
    return leader;
  }

  /** Takes the lock if it is free (pg_try_advisory_lock: never waits); true when this session leads. */
  async tryLead(): Promise<boolean> {
    const { rows } = await this.client.query<{ ok: boolean; pid: number }>(`SELECT pg_try_advisory_lock(${this.lock.key}) AS ok, pg_backend_pid() AS pid`, [
      ...this.lock.values,
    ]);
    const ok = rows[0]?.ok === true;
    if (ok) this.backendPid = rows[0]!.pid;
    return ok;
  }

  /** Whether the lock was taken and its connection is still up. */
  get leading(): boolean {
    return this.backendPid !== undefined && !this.ended;
  }

  /** The lock session's backend pid (pg_locks.pid), for writes guarded by the lock; only once leading. */
  get pid(): number {
    if (this.backendPid === undefined) throw new Error('AdvisoryLeader.pid: not leading');
    return this.backendPid;
  }

  /** Ends the session, which lets the lock go. */
  async release(): Promise<void> {
    await this.client.end().catch(() => undefined);
  }
}
